#include "core/tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

#include <map>

#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/unicode.h"
#include "core/util/json_limits.h"
#include "core/util/strings.h"

namespace grpo::core {

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
                       " (known: " + join(names, ", ") + ")");
}

bool python_isspace(std::uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
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

std::string python_strip(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e) {
    std::size_t len = 1;
    if (!python_isspace(unicode::decode_at(s, b, &len))) break;
    b += len;
  }
  while (e > b) {
    std::size_t p = e - 1;
    while (p > b && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
    if (!python_isspace(unicode::decode_at(s, p))) break;
    e = p;
  }
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> chat_template_special_tokens(const std::string& name) {
  chat_template_jinja(name);  // unknown names fail here, with the list
  if (name == "chatml") return {"<|im_start|>", "<|im_end|>"};
  if (name == "llama3") return {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  return {};
}

std::string render_chat(const std::string& template_name, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
  chat_template_jinja(template_name);  // validates the name
  std::string out;
  if (template_name == "chatml") {
    for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
  } else if (template_name == "llama3") {
    for (std::size_t i = 0; i < messages.size(); ++i) {
      if (i == 0) out += "<|begin_of_text|>";
      out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n" + python_strip(messages[i].content) +
             "<|eot_id|>";
    }
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  } else {  // none
    for (const ChatMessage& m : messages) out += m.content;
  }
  return out;
}

std::vector<ChatMessage> chat_messages_from_json(std::string_view json_text) {
  using json = nlohmann::json;
  if (auto deep = json_nesting_error(json_text)) throw TokenizerError(*deep);
  json j;
  try {
    j = json::parse(json_text.begin(), json_text.end());
  } catch (const json::parse_error& e) {
    throw TokenizerError(std::string("invalid JSON: ") + e.what());
  }
  if (j.is_object() && j.contains("messages")) j = j["messages"];
  const char* expected = "expected a messages list [{\"role\": \"user\", \"content\": \"...\"}, ...]";
  if (!j.is_array()) throw TokenizerError(std::string(expected) + ", got " + j.type_name());
  std::vector<ChatMessage> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const json& m = j[i];
    std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw TokenizerError(at + ": expected an object {\"role\": ..., \"content\": ...}, got " + m.type_name());
    auto role = m.find("role");
    auto content = m.find("content");
    if (role == m.end() || !role->is_string()) throw TokenizerError(at + ".role: expected a string");
    if (content == m.end() || !content->is_string()) throw TokenizerError(at + ".content: expected a string");
    out.push_back(ChatMessage{role->get<std::string>(), content->get<std::string>()});
  }
  return out;
}

}  // namespace grpo::core
