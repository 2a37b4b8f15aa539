// Chat templates: how a conversation becomes the prompt text, with transformers'
// apply_chat_template semantics, rendered by the Jinja engine (core/jinja). A template is the
// model's own (`auto`: chat_template.jinja or tokenizer_config.json), a .jinja file, or one of
// the built-in names (chatml, llama3, none), whose Jinja sources are kept here and go into a
// checkpoint's tokenizer_config.json. See docs/tokenizer.md.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tokenizer/tokenizer.h"

namespace grpo::core {

namespace jinja {
class Template;
}

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool" (any string is passed as given)
  std::string content;
  // The message's other fields as a JSON object text, in their order ("" when none):
  // tool_calls, name, tool_call_id, reasoning_content, ... A "content" here (null, or a list
  // of parts) replaces the string `content`.
  std::string extra_json;
};

// "chatml", "llama3", "none".
std::vector<std::string> chat_template_names();

// The Jinja source of a named template. Unknown name -> TokenizerError listing the names
// (with "did you mean").
const std::string& chat_template_jinja(const std::string& name);

// The special tokens a named template writes (e.g. chatml: <|im_start|>, <|im_end|>): a
// tokenizer that lacks one would split it into ordinary pieces, a silently wrong prompt.
std::vector<std::string> chat_template_special_tokens(const std::string& name);

// What one rendering gets besides the messages, as transformers' apply_chat_template passes it.
struct ChatRenderOptions {
  bool add_generation_prompt = true;
  nlohmann::ordered_json tools;      // null or a list of tool schemas
  nlohmann::ordered_json documents;  // null or a list of documents
  // More template variables (e.g. {"enable_thinking": false}); they override the special
  // tokens of the same name.
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
};

// A resolved chat template. Immutable after construction; render() may run concurrently.
class ChatTemplate {
 public:
  // `spec` is tokenizer.chat_template: "auto" (the tokenizer's own template; when it has none,
  // the built-in chatml, and fell_back() says so), a built-in name, or a path to a Jinja file.
  // The special tokens of the tokenizer's tokenizer_config.json become template variables.
  // Throws TokenizerError: a missing file, a template that does not parse (file and line), or
  // a built-in template whose special tokens the tokenizer lacks.
  static ChatTemplate resolve(const std::string& spec, const Tokenizer& tokenizer);
  // A built-in template by name, without a tokenizer (llama3's bos_token is <|begin_of_text|>).
  static ChatTemplate builtin(const std::string& name);
  // Jinja source text; `origin` names it in errors.
  static ChatTemplate from_source(const std::string& source, const std::string& origin,
                                  const Tokenizer* tokenizer = nullptr);

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ChatTemplate(const ChatTemplate&);
  ChatTemplate& operator=(const ChatTemplate&);
  ~ChatTemplate();

  // Variables every rendering gets (tokenizer.chat_template_kwargs): they override the special
  // tokens and are overridden by ChatRenderOptions::variables. Throws TokenizerError when
  // `variables` is not an object.
  void set_variables(const nlohmann::ordered_json& variables);

  // The rendered prompt. Throws TokenizerError: for raise_exception() the template's own
  // message; for other errors the template's origin and line.
  std::string render(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options = {}) const;
  // `messages` as a JSON list of message objects (any fields: tool_calls, content parts, ...).
  std::string render_json(const nlohmann::ordered_json& messages, const ChatRenderOptions& options = {}) const;

  // "chatml (built-in)", "DIR/tokenizer_config.json: chat_template", "PATH", ...
  const std::string& origin() const { return origin_; }
  // The templates to write into a checkpoint's tokenizer_config.json ({"default", source}, and
  // "tool_use" when the tokenizer has one).
  const std::vector<NamedChatTemplate>& sources() const { return sources_; }
  // spec was auto and the tokenizer has no chat template: the built-in chatml is used.
  bool fell_back() const { return fell_back_; }
  // "chatml", "llama3" or "none" for a built-in template, else "".
  const std::string& builtin_name() const { return builtin_name_; }

 private:
  ChatTemplate() = default;
  void compile();
  std::vector<NamedChatTemplate> sources_;
  std::vector<std::shared_ptr<const jinja::Template>> compiled_;  // parallel to sources_
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
  nlohmann::ordered_json variables_ = nlohmann::ordered_json::object();
  std::string origin_;
  std::string builtin_name_;
  bool fell_back_ = false;
};

// Why `spec` cannot name a template (not auto, not a built-in name, not an existing file), or
// nullopt; checked before a tokenizer is at hand (the template's text is checked by resolve).
std::optional<std::string> chat_template_spec_problem(const std::string& spec);

// A built-in template rendered without a tokenizer: ChatTemplate::builtin(name).render(...).
std::string render_chat(const std::string& template_name, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt);

// A JSON messages list as ChatMessages: [{"role": "...", "content": "...", ...}, ...].
// content may be null or a list of parts when the message has other fields (tool calls).
// Throws TokenizerError naming the message and field.
std::vector<ChatMessage> chat_messages_from_json_value(const nlohmann::ordered_json& messages);
// Parses JSON text: a messages list, or an object with a "messages" key holding one.
std::vector<ChatMessage> chat_messages_from_json(std::string_view json_text);
// The messages as the JSON list a template sees.
nlohmann::ordered_json chat_messages_to_json(const std::vector<ChatMessage>& messages);

// Python's str.strip() (what Jinja's `trim` filter does): removes leading and trailing
// characters for which str.isspace() is true.
std::string python_strip(std::string_view s);

}  // namespace grpo::core
