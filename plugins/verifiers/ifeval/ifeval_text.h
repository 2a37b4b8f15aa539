// Text helpers with the semantics of the IFEval reference (google-research
// instruction_following_eval/instructions_util.py and the Python functions it calls), shared by
// the instruction checkers: Python-`re`-compatible regexes (PCRE2, Unicode), word and sentence
// counting, language detection, Python's str case predicates.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace grpo_ifeval {

// A compiled Python-style regex (PCRE2 with UTF and Unicode properties, so \w \s \b are
// Unicode as in Python 3). Immutable after construction; matching is thread-safe.
class Regex {
 public:
  enum Flags { kNone = 0, kIgnoreCase = 1, kMultiline = 2, kDotAll = 4 };
  explicit Regex(const std::string& pattern, int flags = kNone);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  bool ok() const { return code_ != nullptr; }
  const std::string& error() const { return error_; }
  // re.search(pattern, text) is not None
  bool search(std::string_view text) const;
  // len(re.findall(pattern, text)), and the matched texts when `out` is given
  std::size_t find_all(std::string_view text, std::vector<std::string>* out = nullptr) const;
  // re.split(pattern, text)
  std::vector<std::string> split(std::string_view text) const;
  // re.sub(pattern, replacement, text) with \1..\9 group references in `replacement`.
  std::string sub(std::string_view text, const std::string& replacement) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8*
  std::string error_;
};

// re.escape-free use: the caller builds patterns from kwargs exactly as the reference does.

// len(nltk.tokenize.RegexpTokenizer(r"\w+").tokenize(text)).
std::size_t count_words(std::string_view text);
// len(nltk punkt English sentence tokenizer(text)): a port of NLTK's PunktSentenceTokenizer
// with the trained English parameters (punkt_english.inc).
std::size_t count_sentences(std::string_view text);
// instructions_util.split_into_sentences (the reference's regex splitter, used by IFEvalG ids).
std::vector<std::string> split_into_sentences(std::string_view text);
// Python s[::-1] (by code point).
std::string py_reverse(std::string_view text);
// nltk.word_tokenize approximation used by change_case:capital_word_frequency (ifeval.md).
std::vector<std::string> word_tokens(std::string_view text);
// The language of `text` as the reference's langdetect would name it ("en", "fr", "zh-cn",
// ...), by CLD2; "" when no language can be detected (langdetect raises then).
std::string detect_language(std::string_view text);
// Python str.lower() / str.isupper() / str.islower() over UTF-8 (Unicode letter categories).
std::string py_lower(std::string_view text);
bool py_isupper(std::string_view text);
bool py_islower(std::string_view text);
// Python str.strip() (whitespace), with optional characters as str.strip(chars).
std::string py_strip(std::string_view text, std::string_view chars = {});

}  // namespace grpo_ifeval
