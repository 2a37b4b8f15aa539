// Chat templates against transformers itself: tokenizer.apply_chat_template (transformers 5, run
// offline by hf_apply_chat_template.py with the pinned venv Python) on the public model templates
// the suite ships in tokenizer_config.json (Qwen3, Llama 3, Llama 3.1, Gemma 3, DeepSeek-V3).
// Conversations: the 19 of tests/tokenizer/chat_templates/conversations.json (tools, tool calls
// and results, parallel calls, arguments as object and string, documents, reasoning) plus this
// folder's conversations_tools.json (tool calls with null content and string arguments, DeepSeek's
// tool branch; multi-step tool loops with reasoning_content, Qwen3's). Qwen3 renders each one
// with enable_thinking absent, true and false. Ours renders through ChatTemplate::resolve("auto")
// with tools/documents/variables, the path training takes; the rendered text must be identical
// and tokenize to the ids transformers gives (apply_chat_template(tokenize=True)). A template that
// raises in transformers must raise here, with the same raise_exception message.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/reference/tokenizer/hf_reference.h"

namespace grpo::testing {
namespace {

using ojson = nlohmann::ordered_json;
using grpo::core::ChatRenderOptions;
using grpo::core::ChatTemplate;
using grpo::core::Tokenizer;

const std::vector<std::string> kTemplates = {"qwen3", "llama3", "llama3_1", "gemma3", "deepseek_v3"};

ojson read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  return ojson::parse(f);
}

struct Case {
  std::string what;  // "qwen3 × tool_call_roundtrip × enable_thinking=false"
  std::size_t tokenizer;  // index in kTemplates
  ojson conversation;     // name, messages, tools?, documents?, add_generation_prompt, variables?
};

struct Outcome {
  bool ok = false;
  std::string text;  // the rendering, or the error message
  bool template_error = false;  // a raise_exception() message
  std::vector<int> ids;
};

Outcome render_ours(const ChatTemplate& tmpl, const ojson& conv) {
  ChatRenderOptions o;
  o.add_generation_prompt = conv["add_generation_prompt"].get<bool>();
  o.tools = conv.value("tools", ojson());
  o.documents = conv.value("documents", ojson());
  o.variables = conv.value("variables", ojson::object());
  try {
    return {true, tmpl.render_json(conv["messages"], o)};
  } catch (const grpo::core::TokenizerError& e) {
    // "the chat template raised an error: MESSAGE (ORIGIN:LINE)" for raise_exception().
    const std::string prefix = "the chat template raised an error: ";
    const std::string msg = e.what();
    if (msg.rfind(prefix, 0) == 0) return {false, msg.substr(prefix.size(), msg.rfind(" (") - prefix.size()), true};
    return {false, msg, false};
  }
}

std::vector<Case> make_cases() {
  ojson conversations = read_json(source_dir() + "/tests/tokenizer/chat_templates/conversations.json");
  for (const auto& c : read_json(reference_scripts_dir() + "/conversations_tools.json")) conversations.push_back(c);
  std::vector<Case> cases;
  for (std::size_t t = 0; t < kTemplates.size(); ++t)
    for (const auto& conv : conversations) {
      const std::string what = kTemplates[t] + " × " + conv["name"].get<std::string>();
      cases.push_back({what, t, conv});
      // Qwen3 reads enable_thinking (the generation prompt's empty <think> block): every
      // conversation also with it set both ways, overriding the conversation's own value.
      if (kTemplates[t] != "qwen3") continue;
      for (bool thinking : {true, false}) {
        ojson c = conv;
        if (!c.contains("variables")) c["variables"] = ojson::object();
        c["variables"]["enable_thinking"] = thinking;
        cases.push_back({what + " × enable_thinking=" + (thinking ? "true" : "false"), t, c});
      }
    }
  return cases;
}

std::vector<Outcome> run_transformers(const std::vector<Case>& cases) {
  ojson input = ojson::array();
  for (const Case& c : cases) {
    input.push_back({{"tokenizer", reference_tokenizer_dir(kTemplates[c.tokenizer])},
                     {"messages", c.conversation["messages"]},
                     {"tools", c.conversation.value("tools", ojson())},
                     {"documents", c.conversation.value("documents", ojson())},
                     {"add_generation_prompt", c.conversation["add_generation_prompt"]},
                     {"kwargs", c.conversation.value("variables", ojson::object())}});
  }
  const std::string in = tmp_dir() + "/hf-chat-cases.json";
  const std::string out = tmp_dir() + "/hf-chat-rendered.json";
  std::ofstream(in, std::ios::binary) << input.dump();
  std::filesystem::remove(out);
  run_reference_script("hf_apply_chat_template.py", {in, out});
  std::vector<Outcome> outcomes;
  for (const auto& j : read_json(out)) {
    if (j.contains("text"))
      outcomes.push_back({true, j["text"].get<std::string>(), false, j["ids"].get<std::vector<int>>()});
    else
      outcomes.push_back({false, j["error"].get<std::string>(), j["template_error"].get<bool>(), {}});
  }
  return outcomes;
}

TEST(HfChatTemplates, RenderingsAndIdsEqualApplyChatTemplate) {
  const std::string problem = hf_reference_problem(kTemplates);
  ASSERT_TRUE(problem.empty()) << problem;
  std::vector<Tokenizer> tokenizers;
  std::vector<ChatTemplate> templates;
  tokenizers.reserve(kTemplates.size());  // the templates may keep pointers to their tokenizer
  for (const std::string& name : kTemplates) {
    tokenizers.push_back(Tokenizer::load(reference_tokenizer_dir(name)));
    templates.push_back(ChatTemplate::resolve("auto", tokenizers.back()));
    ASSERT_FALSE(templates.back().fell_back()) << name << " has no chat template of its own";
  }
  const std::vector<Case> cases = make_cases();
  const std::vector<Outcome> reference = run_transformers(cases);
  ASSERT_EQ(reference.size(), cases.size());

  std::size_t rendered = 0, raised = 0, identical = 0, tokens = 0, with_tools = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const Outcome& hf = reference[i];
    const Outcome ours = render_ours(templates[c.tokenizer], c.conversation);
    if (c.conversation.contains("tools")) ++with_tools;
    if (hf.ok) {
      ++rendered;
      EXPECT_TRUE(ours.ok) << c.what << ": transformers renders, ours fails: " << ours.text;
      if (!ours.ok) continue;
      EXPECT_EQ(ours.text, hf.text) << c.what;
      const std::vector<int> ids = tokenizers[c.tokenizer].encode(ours.text);
      EXPECT_EQ(ids_str(ids), ids_str(hf.ids)) << c.what << ": ids of the rendered text";
      tokens += hf.ids.size();
      if (ours.text == hf.text && ids == hf.ids) ++identical;
    } else {
      ++raised;
      EXPECT_FALSE(ours.ok) << c.what << ": transformers fails (" << hf.text << "), ours renders:\n" << ours.text;
      // raise_exception messages are the template's own text; other failures (a str + dict
      // concatenation, say) are worded by each engine in its own way.
      EXPECT_EQ(ours.template_error, hf.template_error) << c.what << ": ours " << ours.text << " / transformers " << hf.text;
      if (hf.template_error) EXPECT_EQ(ours.text, hf.text) << c.what;
      if (!ours.ok && ours.template_error == hf.template_error && (!hf.template_error || ours.text == hf.text)) ++identical;
    }
  }
  // The cases must reach the interesting branches: most render, and tool conversations are many.
  EXPECT_GE(rendered * 4, cases.size() * 3);
  EXPECT_GE(with_tools, 30u);
  std::cout << "[hf-chat] " << identical << "/" << cases.size() << " cases identical to apply_chat_template ("
            << kTemplates.size() << " templates; " << rendered << " rendered, " << tokens << " tokens compared; " << raised
            << " raise in both; " << with_tools << " with tools)\n";
}

}  // namespace
}  // namespace grpo::testing
