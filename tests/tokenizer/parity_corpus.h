// Deterministic text corpus for the tokenizer parity test (and the tokenizer benchmark):
// hand-picked edge cases plus generated strings mixing ASCII words, digits and long numbers,
// whitespace runs, newlines/tabs, CJK, kana, Hangul, Cyrillic, Greek, Arabic, Devanagari,
// accents (precomposed and combining), emoji (with skin tones and ZWJ), LaTeX, code, the Qwen,
// Llama-2 and Gemma special tokens, byte-token look-alikes and the metaspace U+2581. The same
// seed gives the same strings on every machine (own PRNG, no std:: distributions). Code points come from blocks assigned long ago, so that differences in
// the Unicode version of PCRE2, utf8proc and Node's ICU cannot matter.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tokenizer/unicode.h"

namespace grpo::testing {

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
  std::uint32_t in(std::uint32_t lo, std::uint32_t hi) { return lo + static_cast<std::uint32_t>(below(hi - lo + 1)); }

 private:
  std::uint64_t s_;
};

// Codepoints become UTF-8 with the tokenizer's own encoder: it only builds the input strings
// (the reference ids come from node), so sharing it does not weaken the parity check.
inline void corpus_append_utf8(std::string& out, std::uint32_t cp) { core::unicode::append_utf8(out, cp); }

inline std::vector<std::string> corpus_edge_cases() {
  return {
      "Hello World",
      "hello world",
      " Hello",
      "  leading spaces",
      "trailing spaces   ",
      "I'm you're they've we'll she'd it's don't",
      "I'M YOU'RE THEY'VE WE'LL SHE'D IT'S DON'T",
      "'s 't 're 've 'm 'll 'd",
      "'S 'ſ 'K",  // U+017F LONG S: the reference folds ASCII only
      "a\xE1\xA0\x8E" "b",  // U+180E (not White_Space)
      "a\xC2\x85" "b a\xC2\xA0" "b a\xE2\x80\x8B" "b a\xEF\xBB\xBF" "b",  // NEL, NBSP, ZWSP, BOM
      "x  \n\n  y",
      "\n",
      "\n\n\n",
      "\r\n",
      "a\r\nb\r\n\r\nc",
      "\t\tindented\n\t\tcode",
      "    ",
      " ",
      "",
      "1",
      "12",
      "123",
      "1234567890",
      "3.14159265358979323846264338327950288419716939937510",
      "-42 +17 1e-9 0x1F 1,000,000 99.9%",
      "<|im_start|>",
      "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n",
      "<think>\nLet me think.\n</think>\n\nThe answer is 4.",
      "<|im_start|><|im_end|><|endoftext|>",
      "<|im_start <|im_end| im_start|> <| |>",
      "text<|endoftext|>more text",
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
      "<|fim_prefix|>def f(x):<|fim_suffix|>    return x<|fim_middle|>",
      "\\frac{a}{b} + \\sqrt{x^2 + y^2} = \\int_0^\\infty e^{-x}\\,dx",
      "$$\\sum_{i=1}^{n} i = \\frac{n(n+1)}{2}$$",
      "\\begin{align} a &= b \\\\ c &= d \\end{align}",
      "def f(x):\n    return x ** 2  # square\n",
      "for (int i = 0; i < n; ++i) { sum += a[i]; }",
      "if x != None and y >= 3:\n\tprint(f\"{x=}\")",
      "caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9 \xC3\x85ngstr\xC3\xB6m",
      "cafe\xCC\x81 (decomposed, not NFC)",
      "A\xCC\x8A \xEF\xAC\x81 \xE2\x84\xAB",  // A + ring, fi ligature, Angstrom sign
      "\xE6\x9D\xB1\xE4\xBA\xAC\xE9\x83\xBD\xE6\xB8\x8B\xE8\xB0\xB7\xE5\x8C\xBA",
      "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xEF\xBC\x81",
      "\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF",
      "\xEC\x95\x88\xEB\x85\x95\xED\x95\x98\xEC\x84\xB8\xEC\x9A\x94",
      "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xD0\xBC\xD0\xB8\xD1\x80",
      "\xF0\x9F\x98\x80\xF0\x9F\x98\x82\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",
      "\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7 flags",
      "!!!???...,,,;;;:::",
      "\"quoted\" 'single' `back`",
      "a  b   c    d",
      "end with newline\n",
      "end with spaces and newline   \n",
      "\x01\x02\x1F\x7F control",
      std::string("nul\0inside", 10),
      std::string(300, ' '),
      std::string(200, 'a'),
      std::string(150, '9'),
      "https://example.com/path?query=1&b=2#frag",
      "user@example.com",
      // SentencePiece-style files (Llama-2, Gemma): their special tokens, text that looks like a
      // byte-fallback token or holds the metaspace U+2581 itself, private-use characters (byte
      // fallback, 3 and 4 bytes), runs of newlines/tabs/spaces longer than Gemma's added tokens.
      "<s>Hello</s> <s> world</s><unk>",
      "<pad><bos><eos><unk><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
      "<0x41><0x0A> <0xff> <0x> <0x4G>",
      "\xE2\x96\x81Hello \xE2\x96\x81\xE2\x96\x81world\xE2\x96\x81 \xE2\x96\x81",
      " \xE2\x96\x81 leading space then metaspace",
      "\xEE\x80\x80\xEF\xA3\xBF\xF3\xB0\x80\x80 private use",
      std::string(35, '\n') + "x" + std::string(33, '\t') + "y" + std::string(40, ' ') + "z",
  };
}

// Generated strings: `count` strings from `seed`.
inline std::vector<std::string> corpus_generated(std::size_t count, std::uint64_t seed = 20240601) {
  SplitMix64 r(seed);
  static const char* const words[] = {"the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was",
                                      "on", "be", "at", "by", "this", "have", "from", "or", "Hello", "World",
                                      "GRPO", "tokenizer", "reward", "policy", "gradient", "Qwen", "Llama",
                                      "transformer", "unbelievable", "antidisestablishmentarianism", "x", "y",
                                      "HTTP", "JSON", "camelCase", "snake_case", "don't", "we'll", "I'm"};
  static const char* const latex[] = {"\\frac{1}{2}", "\\sqrt{2}", "x^{2}", "\\alpha", "\\beta_i", "\\sum_{k=0}^{n}",
                                      "\\int", "\\left(", "\\right)", "\\cdot", "\\le", "$", "$$", "\\boxed{42}",
                                      "\\mathbb{R}", "\\{", "\\}"};
  static const char* const code[] = {"def ", "return ", "if (", ") {", "}", "};", "x += 1;", "std::vector<int>",
                                     "->", "=>", "==", "!=", "&&", "||", "#include <cstdio>", "    ", "\t",
                                     "print(\"hi\")", "// comment", "/* c */", "[0]", "{\"key\": \"value\"}"};
  static const char* const specials[] = {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
                                         "<tool_call>", "</tool_call>", "<|im_start|>user\n", "<|im_start|>assistant\n",
                                         "<|im_end|>\n"};
  static const char* const spaces[] = {" ", "  ", "   ", "\n", "\n\n", "\t", " \n", "\n ", "\r\n", "  \n\n  ",
                                       "\t\t", " \t ", "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\x83"};
  static const char* const punct[] = {".", ",", "!", "?", ";", ":", "'", "\"", "(", ")", "[", "]", "-", "--", "...",
                                      "*", "/", "\\", "@", "#", "%", "&", "_", "~", "|", "<", ">", "=", "+", "'s",
                                      "'re", "\xE2\x80\x94", "\xE2\x80\x9C", "\xE2\x80\x9D", "\xE3\x80\x82",
                                      "\xEF\xBC\x8C", "\xC2\xBF", "\xC2\xA1"};
  auto pick = [&](auto& arr) { return std::string(arr[r.below(sizeof(arr) / sizeof(arr[0]))]); };
  auto cps = [&](std::uint32_t lo, std::uint32_t hi, std::size_t n) {
    std::string s;
    for (std::size_t i = 0; i < n; ++i) corpus_append_utf8(s, r.in(lo, hi));
    return s;
  };
  std::vector<std::string> out;
  out.reserve(count);
  for (std::size_t k = 0; k < count; ++k) {
    std::string s;
    std::size_t fragments = 1 + r.below(k % 10 == 0 ? 60 : 16);
    for (std::size_t f = 0; f < fragments; ++f) {
      switch (r.below(20)) {
        case 0: case 1: case 2: case 3: s += pick(words); break;
        case 4: s += " " + pick(words); break;
        case 5: s += pick(spaces); break;
        case 6: {  // numbers, some long
          std::size_t n = 1 + r.below(r.below(4) == 0 ? 40 : 6);
          for (std::size_t i = 0; i < n; ++i) s += static_cast<char>('0' + r.below(10));
          if (r.below(3) == 0) s += "." + std::to_string(r.below(1000));
          break;
        }
        case 7: s += pick(punct); break;
        case 8: s += cps(0x4E00, 0x9FA5, 1 + r.below(8)); break;  // CJK
        case 9: s += r.below(2) ? cps(0x3041, 0x3094, 1 + r.below(6)) : cps(0x30A1, 0x30FA, 1 + r.below(6)); break;
        case 10: s += cps(0xAC00, 0xD7A3, 1 + r.below(5)); break;  // Hangul syllables
        case 11: s += r.below(2) ? cps(0x0430, 0x044F, 2 + r.below(8)) : cps(0x03B1, 0x03C9, 2 + r.below(8)); break;
        case 12: s += r.below(2) ? cps(0x0627, 0x064A, 2 + r.below(6)) : cps(0x0915, 0x0939, 2 + r.below(6)); break;
        case 13: {  // accents: precomposed Latin-1 / Latin Extended-A, sometimes combining marks
          s += cps(0x00C0, 0x00FF, 1 + r.below(3));
          s += cps(0x0100, 0x017F, r.below(3));
          if (r.below(4) == 0) {
            s += static_cast<char>('a' + r.below(26));
            corpus_append_utf8(s, r.in(0x0300, 0x0315));
          }
          break;
        }
        case 14: {  // emoji, skin tones, ZWJ sequences
          corpus_append_utf8(s, r.below(2) ? r.in(0x1F600, 0x1F64F) : r.in(0x1F300, 0x1F5FF));
          if (r.below(4) == 0) corpus_append_utf8(s, r.in(0x1F3FB, 0x1F3FF));
          if (r.below(4) == 0) {
            corpus_append_utf8(s, 0x200D);
            corpus_append_utf8(s, r.in(0x1F466, 0x1F469));
          }
          break;
        }
        case 15: s += pick(latex); break;
        case 16: s += pick(code); break;
        case 17: if (r.below(3) == 0) s += pick(specials); else s += pick(words); break;
        case 18: s += cps(0x21, 0x7E, 1 + r.below(10)); break;  // random printable ASCII
        default: s += r.below(2) ? "'" + pick(words) : pick(words) + "'" + pick(words); break;
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

// The full parity corpus: edge cases, then `generated` strings.
inline std::vector<std::string> parity_corpus(std::size_t generated = 2200) {
  std::vector<std::string> all = corpus_edge_cases();
  for (auto& s : corpus_generated(generated)) all.push_back(std::move(s));
  return all;
}

}  // namespace grpo::testing
