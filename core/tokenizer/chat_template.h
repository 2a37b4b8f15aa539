// Named chat templates rendered natively (no Jinja engine), each equal to a model's own Jinja
// template for plain-text system/user/assistant conversations. The Jinja source of every
// template is kept here too: it goes into a checkpoint's tokenizer_config.json as
// `chat_template`, so transformers renders the same text. See docs/tokenizer.md.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace grpo::core {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (any string is rendered as given)
  std::string content;
};

// "chatml", "llama3", "none".
std::vector<std::string> chat_template_names();

// The Jinja source of a named template. Unknown name -> TokenizerError listing the names
// (with "did you mean").
const std::string& chat_template_jinja(const std::string& name);

// The special tokens a named template writes (e.g. chatml: <|im_start|>, <|im_end|>): a
// tokenizer that lacks one would split it into ordinary pieces, a silently wrong prompt.
std::vector<std::string> chat_template_special_tokens(const std::string& name);

// Renders `messages` exactly as the template's Jinja source would.
std::string render_chat(const std::string& template_name, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt);

// Parses a JSON messages list: [{"role": "...", "content": "..."}, ...] (or an object with a
// "messages" key holding such a list). Throws TokenizerError saying what was expected.
std::vector<ChatMessage> chat_messages_from_json(std::string_view json_text);

// Python's str.strip() (what Jinja's `trim` filter does): removes leading and trailing
// characters for which str.isspace() is true.
std::string python_strip(std::string_view s);

}  // namespace grpo::core
