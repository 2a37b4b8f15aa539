#!/usr/bin/env python3
# Reference ids from Hugging Face's Rust tokenizers (PyPI `tokenizers`), the library transformers'
# fast tokenizers run on: the tokenizer.json file as written, no transformers class in between.
#
#   python hf_tokenizers_encode.py TOKENIZER_JSON CORPUS_JSONL OUT_JSONL
#
# CORPUS_JSONL: one JSON string per line. OUT_JSONL: one line per string,
#   {"ids": [...], "decoded": "...", "decoded_skip": "..."}
# ids: encode(text, add_special_tokens=False) (chat templates write BOS themselves);
# decoded / decoded_skip: decode(ids) with skip_special_tokens False / True.
import json
import sys

import tokenizers


def main(argv):
    if len(argv) != 4:
        sys.stderr.write("usage: hf_tokenizers_encode.py TOKENIZER_JSON CORPUS_JSONL OUT_JSONL\n")
        return 2
    tok = tokenizers.Tokenizer.from_file(argv[1])
    with open(argv[2], encoding="utf-8") as f:
        texts = [json.loads(line) for line in f if line.strip()]
    with open(argv[3], "w", encoding="utf-8") as out:
        for text in texts:
            ids = tok.encode(text, add_special_tokens=False).ids
            row = {
                "ids": ids,
                "decoded": tok.decode(ids, skip_special_tokens=False),
                "decoded_skip": tok.decode(ids, skip_special_tokens=True),
            }
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
