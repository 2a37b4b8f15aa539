#include "core/tokenizer/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/jinja/jinja.h"
#include "core/jinja/pystring.h"
#include "core/util/fs.h"
#include "core/util/json_limits.h"
#include "core/util/strings.h"

namespace grpo::core {

using ojson = nlohmann::ordered_json;

namespace {

// Plain ChatML as Qwen renders it: no default system message is injected (Qwen3 behaviour;
// Qwen2.5 injects "You are Qwen, created by Alibaba Cloud..." when there is no system turn).
const char* const kChatmlJinja =
    "{%- for message in messages %}\n"
    "    {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}";

// Meta-Llama-3-8B-Instruct's tokenizer_config.json chat_template, verbatim.
const char* const kLlama3Jinja =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

// Plain prompts: the contents, concatenated, no markup.
const char* const kNoneJinja = "{%- for message in messages %}{{- message['content'] }}{%- endfor %}";

const std::map<std::string, std::string>& templates() {
  static const std::map<std::string, std::string> t = {
      {"chatml", kChatmlJinja}, {"llama3", kLlama3Jinja}, {"none", kNoneJinja}};
  return t;
}

[[noreturn]] void unknown(const std::string& name) {
  auto names = chat_template_names();
  throw TokenizerError("unknown chat template '" + name + "'" + did_you_mean(name, names) +
                       " (known: " + join(names, ", ") + ", auto, or a path to a .jinja file)");
}

bool is_builtin(const std::string& name) { return templates().count(name) > 0; }

// The special tokens transformers passes to a template (special_tokens_map): every *_token
// tokenizer_config.json sets, and additional_special_tokens.
ojson special_tokens_of(const Tokenizer& tokenizer) {
  ojson vars = ojson::object();
  for (const auto& [key, content] : tokenizer.special_token_strings()) vars[key] = content;
  if (!tokenizer.additional_special_tokens().empty()) vars["additional_special_tokens"] = tokenizer.additional_special_tokens();
  return vars;
}

void check_builtin_tokens(const std::string& name, const Tokenizer& tokenizer, const std::string& where) {
  std::vector<std::string> missing;
  for (const std::string& t : chat_template_special_tokens(name))
    if (!tokenizer.token_to_id(t)) missing.push_back(t);
  if (!missing.empty())
    throw TokenizerError(where + "the chat template '" + name + "' writes " + join(missing, ", ") +
                         ", which the tokenizer does not have as tokens: the prompt would be split into ordinary "
                         "pieces. Use the model's own template (tokenizer.chat_template: auto) or a .jinja file");
}

}  // namespace

std::vector<std::string> chat_template_names() {
  std::vector<std::string> names;
  for (auto& [k, v] : templates()) names.push_back(k);
  return names;
}

const std::string& chat_template_jinja(const std::string& name) {
  auto it = templates().find(name);
  if (it == templates().end()) unknown(name);
  return it->second;
}

std::string python_strip(std::string_view s) { return jinja::py::strip(s); }

std::vector<std::string> chat_template_special_tokens(const std::string& name) {
  chat_template_jinja(name);  // unknown names fail here, with the list
  if (name == "chatml") return {"<|im_start|>", "<|im_end|>"};
  if (name == "llama3") return {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  return {};
}

// ---- ChatTemplate ---------------------------------------------------------------------------

ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::ChatTemplate(const ChatTemplate&) = default;
ChatTemplate& ChatTemplate::operator=(const ChatTemplate&) = default;
ChatTemplate::~ChatTemplate() = default;

void ChatTemplate::compile() {
  compiled_.clear();
  for (const NamedChatTemplate& s : sources_) {
    const std::string name = sources_.size() > 1 ? origin_ + " [" + s.name + "]" : origin_;
    try {
      compiled_.push_back(std::make_shared<const jinja::Template>(s.source, name));
    } catch (const jinja::JinjaError& e) {
      throw TokenizerError(std::string("chat template ") + e.what());
    }
  }
}

ChatTemplate ChatTemplate::builtin(const std::string& name) {
  ChatTemplate t;
  t.sources_.push_back({"default", chat_template_jinja(name)});
  t.origin_ = name + " (built-in)";
  t.builtin_name_ = name;
  if (name == "llama3") t.special_tokens_["bos_token"] = "<|begin_of_text|>";
  t.compile();
  return t;
}

ChatTemplate ChatTemplate::from_source(const std::string& source, const std::string& origin, const Tokenizer* tokenizer) {
  ChatTemplate t;
  t.sources_.push_back({"default", source});
  t.origin_ = origin;
  if (tokenizer) t.special_tokens_ = special_tokens_of(*tokenizer);
  t.compile();
  return t;
}

ChatTemplate ChatTemplate::resolve(const std::string& spec, const Tokenizer& tokenizer) {
  if (spec == "auto") {
    if (tokenizer.chat_templates().empty()) {
      check_builtin_tokens("chatml", tokenizer,
                           "auto: the tokenizer has no chat template (no chat_template.jinja, no chat_template in "
                           "tokenizer_config.json), and ");
      ChatTemplate t = builtin("chatml");
      t.special_tokens_ = special_tokens_of(tokenizer);
      t.fell_back_ = true;
      return t;
    }
    ChatTemplate t;
    t.sources_ = tokenizer.chat_templates();
    t.origin_ = tokenizer.chat_template_origin().empty() ? "the tokenizer's chat template" : tokenizer.chat_template_origin();
    t.special_tokens_ = special_tokens_of(tokenizer);
    t.compile();
    return t;
  }
  if (is_builtin(spec)) {
    check_builtin_tokens(spec, tokenizer, "");
    ChatTemplate t = builtin(spec);
    const ojson defaults = t.special_tokens_;
    t.special_tokens_ = special_tokens_of(tokenizer);
    for (auto it = defaults.begin(); it != defaults.end(); ++it)
      if (!t.special_tokens_.contains(it.key())) t.special_tokens_[it.key()] = it.value();
    return t;
  }
  // A path: a .jinja file (its text is the template).
  if (auto problem = chat_template_spec_problem(spec)) throw TokenizerError(*problem);
  std::string text;
  try {
    text = read_file(spec);
  } catch (const std::exception& e) {
    throw TokenizerError(std::string("chat template: ") + e.what());
  }
  return from_source(text, spec, &tokenizer);
}

std::optional<std::string> chat_template_spec_problem(const std::string& spec) {
  if (spec == "auto" || is_builtin(spec)) return std::nullopt;
  std::error_code ec;
  if (std::filesystem::is_regular_file(spec, ec)) return std::nullopt;
  const std::string expected = "expected auto, " + join(chat_template_names(), ", ") + " or the path of a Jinja file";
  const bool looks_like_name = spec.find('/') == std::string::npos && spec.find('.') == std::string::npos;
  if (looks_like_name)
    return "unknown chat template '" + spec + "'" + did_you_mean(spec, chat_template_names()) + " (" + expected + ")";
  return "chat template file '" + spec + "' does not exist (" + expected + ")";
}

std::string ChatTemplate::render_json(const ojson& messages, const ChatRenderOptions& options) const {
  // transformers: the "tool_use" template when tools are given and there is one, else "default".
  const bool has_tools = !options.tools.is_null();
  auto named = [&](const char* name) {
    return std::find_if(sources_.begin(), sources_.end(), [&](const NamedChatTemplate& t) { return t.name == name; });
  };
  auto chosen = has_tools ? named("tool_use") : sources_.end();
  if (chosen == sources_.end()) chosen = named("default");
  if (chosen == sources_.end()) {
    std::vector<std::string> names;
    for (const auto& s : sources_) names.push_back(s.name);
    throw TokenizerError(origin_ + ": no chat template named 'default'" +
                         std::string(has_tools ? " or 'tool_use'" : "") + " (the file has: " + join(names, ", ") + ")");
  }
  const std::size_t pick = static_cast<std::size_t>(chosen - sources_.begin());
  // transformers' render_jinja_template: messages, tools, documents, add_generation_prompt,
  // then the special tokens, then the caller's variables (which win).
  auto context = std::make_shared<jinja::Dict>();
  context->set("messages", jinja::from_json(messages));
  context->set("tools", jinja::from_json(options.tools));
  context->set("documents", jinja::from_json(options.documents));
  context->set("add_generation_prompt", jinja::Value(options.add_generation_prompt));
  for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it)
    context->set(it.key(), jinja::from_json(it.value()));
  for (auto it = variables_.begin(); it != variables_.end(); ++it) context->set(it.key(), jinja::from_json(it.value()));
  if (options.variables.is_object())
    for (auto it = options.variables.begin(); it != options.variables.end(); ++it)
      context->set(it.key(), jinja::from_json(it.value()));
  try {
    return compiled_[pick]->render(jinja::Value(context));
  } catch (const jinja::JinjaError& e) {
    if (e.raised())
      throw TokenizerError("the chat template raised an error: " + e.message() + " (" + compiled_[pick]->name() + ":" +
                           std::to_string(e.line()) + ")");
    throw TokenizerError(std::string("chat template ") + e.what());
  }
}

void ChatTemplate::set_variables(const ojson& variables) {
  if (!variables.is_object())
    throw TokenizerError(std::string("chat template variables: expected a map of names to values, got ") + variables.type_name());
  variables_ = variables;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) const {
  return render_json(chat_messages_to_json(messages), options);
}

std::string render_chat(const std::string& template_name, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
  ChatRenderOptions o;
  o.add_generation_prompt = add_generation_prompt;
  return ChatTemplate::builtin(template_name).render(messages, o);
}

// ---- messages as JSON -----------------------------------------------------------------------

std::vector<ChatMessage> chat_messages_from_json_value(const ojson& j) {
  const char* expected = "expected a messages list [{\"role\": \"user\", \"content\": \"...\"}, ...]";
  if (!j.is_array()) throw TokenizerError(std::string(expected) + ", got " + j.type_name());
  std::vector<ChatMessage> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const ojson& m = j[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw TokenizerError(at + ": expected an object {\"role\": ..., \"content\": ...}, got " + m.type_name());
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) throw TokenizerError(at + ".role: expected a string");
    ChatMessage msg;
    msg.role = role->get<std::string>();
    ojson extra = ojson::object();
    bool has_content = false;
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (it.key() == "role") continue;
      if (it.key() == "content" && it.value().is_string()) {
        msg.content = it.value().get<std::string>();
        has_content = true;
        continue;
      }
      if (it.key() == "content") {
        if (!it.value().is_null() && !it.value().is_array())
          throw TokenizerError(at + ".content: expected a string, null or a list of parts, got " + it.value().type_name());
        has_content = true;
      }
      extra[it.key()] = it.value();
    }
    if (!has_content) throw TokenizerError(at + ".content: expected a string");
    if (extra.contains("content") && extra.size() == 1)
      throw TokenizerError(at + ".content: expected a string (null or a list of parts only with other fields such as tool_calls)");
    if (!extra.empty()) msg.extra_json = extra.dump();
    out.push_back(std::move(msg));
  }
  return out;
}

std::vector<ChatMessage> chat_messages_from_json(std::string_view json_text) {
  if (auto deep = json_nesting_error(json_text)) throw TokenizerError(*deep);
  ojson j;
  try {
    j = ojson::parse(json_text.begin(), json_text.end());
  } catch (const ojson::parse_error& e) {
    throw TokenizerError(std::string("invalid JSON: ") + e.what());
  }
  if (j.is_object() && j.contains("messages")) j = j["messages"];
  return chat_messages_from_json_value(j);
}

ojson chat_messages_to_json(const std::vector<ChatMessage>& messages) {
  ojson out = ojson::array();
  for (const ChatMessage& m : messages) {
    ojson o = ojson::object();
    o["role"] = m.role;
    o["content"] = m.content;
    if (!m.extra_json.empty()) {
      const ojson extra = ojson::parse(m.extra_json);
      for (auto it = extra.begin(); it != extra.end(); ++it) o[it.key()] = it.value();
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace grpo::core
