// libFuzzer target: the input bytes are a tokenizer.json text. Loading must either succeed or
// throw TokenizerError; when it loads, encoding and decoding a short string must not crash.
// Build/run: see docs/tokenizer.md ("Fuzzing").
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    grpo::core::Tokenizer tok = grpo::core::Tokenizer::from_json(text, "fuzz/tokenizer.json");
    static const char* const samples[] = {"Hello, world! 123", "<|im_start|>user\nhi<|im_end|>",
                                          "caf\xC3\xA9 \xE6\x9D\xB1 \xF0\x9F\x98\x80  \n\t x"};
    for (const char* s : samples) {
      std::vector<int> ids = tok.encode(s, grpo::core::EncodeOptions{true});
      (void)tok.decode(ids);
      (void)tok.decode(ids, grpo::core::DecodeOptions{true});
    }
    (void)tok.token_to_id("a");
    if (tok.vocab_size() > 0) {
      try {
        (void)tok.id_to_token(tok.vocab_size() - 1);
      } catch (const grpo::core::TokenizerError&) {
      }
    }
  } catch (const grpo::core::TokenizerError&) {
    // expected for invalid input
  }
  return 0;
}
