// Guard for JSON from untrusted files (safetensors headers, config.json, tokenizer.json,
// grpo-tokenize's stdin). nlohmann's parser is iterative, but dump(), copies and
// comparisons recurse, so a value nested 100,000 levels deep would exhaust the stack in an
// error message or a save. Every loader checks the nesting first; real files nest < 10 deep.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace grpo::core {

inline constexpr std::size_t kMaxJsonNesting = 64;

// nullopt when the arrays/objects of `text` (brackets outside strings) nest at most
// `max_depth` deep; else "JSON nested deeper than 64 levels (at byte N)".
std::optional<std::string> json_nesting_error(std::string_view text, std::size_t max_depth = kMaxJsonNesting);

}  // namespace grpo::core
