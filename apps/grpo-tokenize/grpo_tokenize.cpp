#include "apps/grpo-tokenize/grpo_tokenize.h"

#include <nlohmann/json.hpp>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "apps/cli/exit_codes.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/json_limits.h"
#include "core/util/strings.h"

namespace grpo::cli {

using namespace grpo::core;
using ordered_json = nlohmann::ordered_json;

namespace {

constexpr const char* kUsage = R"(Usage: grpo-tokenize --tokenizer DIR_OR_FILE [options] < input > output

Reads one JSON value per line on stdin and writes one JSON value per line on stdout.
  default    each line is a JSON string; prints its token ids as a JSON array
  --decode   each line is a JSON array of ids; prints the decoded text as a JSON string
  --chat     each line is a messages list [{"role": "user", "content": "..."}, ...] or an
             object {"messages": [...], "tools": [...], "documents": [...],
             "add_generation_prompt": bool, ...more template variables}; renders it with
             --template (transformers' apply_chat_template), then prints the token ids

Options:
  --tokenizer PATH         a folder with tokenizer.json (+ tokenizer_config.json) or a tokenizer.json
  --decode                 decode ids instead of encoding text
  --chat                   render chat messages with the template, then encode
  --template NAME|PATH     chat template: auto (default: the tokenizer's own, chat_template.jinja or
                           tokenizer_config.json), chatml, llama3, none, or a Jinja file
  --render                 with --chat: print the rendered text (JSON string) instead of ids
  --no-generation-prompt   with --chat: do not append the assistant generation prompt (a line's own
                           "add_generation_prompt" wins)
  --add-special-tokens     apply the tokenizer's post-processor (e.g. Llama-3's BOS)
  --skip-special-tokens    with --decode: leave special tokens out of the text
  --tokens                 print token strings (byte-level form) instead of ids
  -h, --help               this help

Examples:
  echo '"Hello world"' | grpo-tokenize --tokenizer .cache/reference-tokenizers/qwen3
  echo '[9707, 1879]' | grpo-tokenize --tokenizer .cache/reference-tokenizers/qwen3 --decode
  echo '[{"role":"user","content":"2+2?"}]' | grpo-tokenize --tokenizer DIR --chat --render
  echo '{"messages":[{"role":"user","content":"hi"}],"enable_thinking":false}' | grpo-tokenize --tokenizer DIR --chat --render --template auto
)";

const std::string& exit_codes() {
  static const std::string text = exit_codes_help(
      {{kExitOk},
       {kExitInternal},
       {kExitUsage},
       {kExitConfig, "the tokenizer files are missing or invalid (the message names the file and JSON key)"},
       {kExitBadInput, "an input line is not what the mode expects (the message names the line number)"}});
  return text;
}

struct Options {
  std::string tokenizer;
  std::string template_name = "auto";
  bool decode = false, chat = false, render = false, generation_prompt = true;
  bool add_special = false, skip_special = false, tokens = false, help = false;
};

const std::vector<std::string>& flag_names() {
  static const std::vector<std::string> names = {
      "--tokenizer", "--decode", "--chat", "--template", "--render", "--no-generation-prompt",
      "--add-special-tokens", "--skip-special-tokens", "--tokens", "--help"};
  return names;
}

// Returns an error message, or "" on success.
std::string parse_args(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string value;
    bool has_inline = false;
    if (starts_with(a, "--") && a.find('=') != std::string::npos) {
      value = a.substr(a.find('=') + 1);
      a = a.substr(0, a.find('='));
      has_inline = true;
    }
    auto take_value = [&](std::string& dst) -> std::string {
      if (has_inline) {
        dst = value;
        return "";
      }
      if (i + 1 >= argc) return "option " + a + " needs a value";
      dst = argv[++i];
      return "";
    };
    auto no_value = [&]() -> std::string { return has_inline ? "option " + a + " takes no value" : ""; };
    std::string err;
    if (a == "--tokenizer") err = take_value(o.tokenizer);
    else if (a == "--template") err = take_value(o.template_name);
    else if (a == "--decode") { err = no_value(); o.decode = true; }
    else if (a == "--chat") { err = no_value(); o.chat = true; }
    else if (a == "--render") { err = no_value(); o.render = true; }
    else if (a == "--no-generation-prompt") { err = no_value(); o.generation_prompt = false; }
    else if (a == "--add-special-tokens") { err = no_value(); o.add_special = true; }
    else if (a == "--skip-special-tokens") { err = no_value(); o.skip_special = true; }
    else if (a == "--tokens") { err = no_value(); o.tokens = true; }
    else if (a == "-h" || a == "--help") o.help = true;
    else return "unknown option '" + a + "'" + did_you_mean(a, flag_names());
    if (!err.empty()) return err;
  }
  if (o.help) return "";
  if (o.tokenizer.empty()) return "--tokenizer DIR_OR_FILE is required";
  if (o.decode && o.chat) return "--decode and --chat cannot be combined";
  if (o.render && !o.chat) return "--render needs --chat";
  return "";
}

// A --chat line: a messages list, or {"messages": [...], "tools", "documents",
// "add_generation_prompt", ...variables}. Returns the problem, or "".
std::string chat_line(const std::string& line, ordered_json& messages, ChatRenderOptions& render) {
  if (auto deep = json_nesting_error(line)) return *deep;
  ordered_json j;
  try {
    j = ordered_json::parse(line);
  } catch (const ordered_json::parse_error& e) {
    return std::string("expected a messages list or an object with \"messages\" (invalid JSON: ") + e.what() + ")";
  }
  if (j.is_object()) {
    if (!j.contains("messages")) return "the object has no \"messages\" (a list of {\"role\", \"content\"} objects)";
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& key = it.key();
      if (key == "messages") {
        messages = it.value();
      } else if (key == "tools" || key == "documents") {
        if (!it.value().is_null() && !it.value().is_array())
          return "\"" + key + "\": expected a list or null, got " + std::string(it.value().type_name());
        (key == "tools" ? render.tools : render.documents) = it.value();
      } else if (key == "add_generation_prompt") {
        if (!it.value().is_boolean()) return "\"add_generation_prompt\": expected true or false";
        render.add_generation_prompt = it.value().get<bool>();
      } else {
        render.variables[key] = it.value();
      }
    }
  } else {
    messages = std::move(j);
  }
  if (!messages.is_array())
    return std::string("expected a messages list [{\"role\": \"user\", \"content\": \"...\"}, ...], got ") +
           messages.type_name();
  for (std::size_t i = 0; i < messages.size(); ++i)
    if (!messages[i].is_object())
      return "messages[" + std::to_string(i) + "]: expected an object {\"role\": ..., \"content\": ...}, got " +
             messages[i].type_name();
  return "";
}

}  // namespace

namespace {

using json = nlohmann::json;

// Token ids as a JSON array line: the ids, or with --tokens their token strings.
void write_ids(std::ostream& out, const Options& o, const Tokenizer& tok, const std::vector<int>& ids) {
  json arr = json::array();
  for (int id : ids) {
    if (o.tokens)
      arr.push_back(tok.id_to_token(id));
    else
      arr.push_back(id);
  }
  out << arr.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
}

// --decode: a JSON array of ids -> the text as a JSON string line; "" or what is wrong.
std::string decode_line(const json& j, const Options& o, const Tokenizer& tok, std::ostream& out) {
  if (!j.is_array()) return std::string("expected a JSON array of token ids, got ") + j.type_name();
  std::vector<int> ids;
  for (std::size_t k = 0; k < j.size(); ++k) {
    if (!j[k].is_number_integer() || j[k].get<long long>() < 0 || j[k].get<long long>() >= tok.vocab_size())
      return "element " + std::to_string(k) + ": expected a token id in 0.." + std::to_string(tok.vocab_size() - 1) +
             ", got " + j[k].dump();
    ids.push_back(j[k].get<int>());
  }
  try {
    out << json(tok.decode(ids, DecodeOptions{o.skip_special})).dump() << "\n";
  } catch (const TokenizerError& e) {
    return e.what();
  }
  return "";
}

// One stdin line translated and written to `out` (a chat rendered or encoded, a string encoded,
// ids decoded); "" or what is wrong with the line.
std::string translate_line(const std::string& line, const Options& o, const Tokenizer& tok,
                           const std::optional<ChatTemplate>& chat_template, std::ostream& out) {
  if (o.chat) {
    ChatRenderOptions render;
    render.add_generation_prompt = o.generation_prompt;
    ordered_json messages;
    if (std::string problem = chat_line(line, messages, render); !problem.empty()) return problem;
    try {
      std::string text = chat_template->render_json(messages, render);
      if (o.render)
        out << json(text).dump() << "\n";
      else
        write_ids(out, o, tok, tok.encode(text, EncodeOptions{o.add_special}));
    } catch (const TokenizerError& e) {
      return e.what();
    }
    return "";
  }
  if (auto deep = json_nesting_error(line)) return *deep;
  json j;
  try {
    j = json::parse(line);
  } catch (const json::parse_error& e) {
    return std::string(o.decode ? "expected a JSON array of token ids" : "expected a JSON string") +
           " (invalid JSON: " + e.what() + ")";
  }
  if (o.decode) return decode_line(j, o, tok, out);
  if (!j.is_string()) return std::string("expected a JSON string, got ") + j.type_name();
  try {
    write_ids(out, o, tok, tok.encode(j.get<std::string>(), EncodeOptions{o.add_special}));
  } catch (const TokenizerError& e) {  // e.g. invalid UTF-8 in the string
    return e.what();
  }
  return "";
}

}  // namespace

int grpo_tokenize_run(int argc, char** argv, std::istream& in, std::ostream& out, std::ostream& err) {
  Options o;
  std::string usage_error = parse_args(argc, argv, o);
  if (o.help) {
    out << kUsage << exit_codes();
    return kExitOk;
  }
  if (!usage_error.empty()) {
    err << "grpo-tokenize: " << usage_error << "\n(see grpo-tokenize --help)\n";
    return kExitUsage;
  }
  if (auto problem = chat_template_spec_problem(o.template_name)) {
    err << "grpo-tokenize: --template: " << *problem << "\n";
    return kExitUsage;
  }
  std::optional<Tokenizer> loaded;
  try {
    loaded.emplace(Tokenizer::load(o.tokenizer));
  } catch (const TokenizerError& e) {
    err << "grpo-tokenize: " << e.what() << "\n";
    return kExitConfig;
  }
  const Tokenizer& tok = *loaded;
  std::optional<ChatTemplate> chat_template;
  if (o.chat) {
    try {
      chat_template.emplace(ChatTemplate::resolve(o.template_name, tok));
    } catch (const TokenizerError& e) {
      err << "grpo-tokenize: --template " << o.template_name << ": " << e.what() << "\n";
      return kExitConfig;
    }
    if (chat_template->fell_back())
      err << "grpo-tokenize: warning: " << o.tokenizer << " has no chat template; using the built-in chatml\n";
  }
  try {
    std::string line;
    std::size_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (const std::string problem = translate_line(line, o, tok, chat_template, out); !problem.empty()) {
        out.flush();
        err << "grpo-tokenize: stdin line " << line_no << ": " << problem << "\n";
        return kExitBadInput;
      }
    }
    out.flush();
    return kExitOk;
  } catch (...) {
    const ExitStatus status = exit_status_of(std::current_exception());
    err << "grpo-tokenize: " << status.message << "\n";
    return status.code;
  }
}

int grpo_tokenize_main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  return grpo_tokenize_run(argc, argv, std::cin, std::cout, std::cerr);
}

}  // namespace grpo::cli
