// Chat templates: expected strings derived by hand from the Jinja sources quoted below (and
// cross-checked once with Python jinja2 while developing; the tests do not need jinja2).
//
// chatml (Qwen3's template restricted to text system/user/assistant turns, see docs/tokenizer.md):
//   {%- for message in messages %}
//       {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}
//   {%- endfor %}
//   {%- if add_generation_prompt %}
//       {{- '<|im_start|>assistant\n' }}
//   {%- endif %}
// llama3 (Meta-Llama-3-8B-Instruct, verbatim; bos_token = '<|begin_of_text|>'):
//   {% set loop_messages = messages %}{% for message in loop_messages %}{% set content =
//   '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim +
//   '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}
//   {{ content }}{% endfor %}{% if add_generation_prompt %}
//   {{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}
//   (`| trim` binds to message['content'] only; it is Python's str.strip()).
#include <gtest/gtest.h>

#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/support/error_of.h"
#include "tests/tokenizer/tokenizer_test_support.h"

namespace grpo::testing {
namespace {

using grpo::core::ChatMessage;
using grpo::core::render_chat;
using grpo::core::Tokenizer;
using grpo::core::TokenizerError;

const std::vector<ChatMessage> kSysUser = {{"system", "You are helpful."}, {"user", "What is 2+2?"}};
const std::vector<ChatMessage> kMultiTurn = {
    {"system", "S"}, {"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}};

TEST(ChatTemplate, ChatmlGenerationPrompt) {
  EXPECT_EQ(render_chat("chatml", kSysUser, true),
            "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(render_chat("chatml", kSysUser, false),
            "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n");
}

TEST(ChatTemplate, ChatmlMultiTurnKeepsContentVerbatim) {
  EXPECT_EQ(render_chat("chatml", kMultiTurn, true),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
            "<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat("chatml", {{"user", "  hi \n"}}, false), "<|im_start|>user\n  hi \n<|im_end|>\n");
  EXPECT_EQ(render_chat("chatml", {}, true), "<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3) {
  EXPECT_EQ(render_chat("llama3", kSysUser, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_chat("llama3", kMultiTurn, false),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU1<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nA1<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU2<|eot_id|>");
}

TEST(ChatTemplate, Llama3TrimsLikePythonStrip) {
  // str.strip() removes ASCII whitespace, U+001C..U+001F, NBSP, ideographic space; keeps ZWSP.
  EXPECT_EQ(render_chat("llama3", {{"user", " \t\n hi there \r\n"}}, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi there<|eot_id|>");
  EXPECT_EQ(grpo::core::python_strip("\xE3\x80\x80x\x1C\xC2\xA0"), "x");
  EXPECT_EQ(grpo::core::python_strip("\xE2\x80\x8Bx"), "\xE2\x80\x8Bx");
  EXPECT_EQ(grpo::core::python_strip("   "), "");
}

TEST(ChatTemplate, NoneConcatenatesContents) {
  EXPECT_EQ(render_chat("none", {{"user", "Solve: 2+2="}}, true), "Solve: 2+2=");
  EXPECT_EQ(render_chat("none", kMultiTurn, true), "SU1A1U2");
}

TEST(ChatTemplate, UnknownNameListsTheNames) {
  std::string msg = error_of<TokenizerError>([] { render_chat("chatm", kSysUser, true); });
  EXPECT_NE(msg.find("unknown chat template 'chatm'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'chatml'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("chatml, llama3, none"), std::string::npos) << msg;
}

TEST(ChatTemplate, JinjaSourcesAreTheQuotedOnes) {
  EXPECT_NE(grpo::core::chat_template_jinja("llama3")
                .find("'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
                      "'<|eot_id|>'"),
            std::string::npos);
  EXPECT_NE(grpo::core::chat_template_jinja("chatml").find("'<|im_start|>assistant\\n'"), std::string::npos);
}

TEST(ChatTemplate, MessagesFromJson) {
  auto m = grpo::core::chat_messages_from_json(R"([{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}])");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[1].role, "assistant");
  EXPECT_EQ(m[1].content, "yo");
  EXPECT_EQ(grpo::core::chat_messages_from_json(R"({"messages":[{"role":"user","content":"x"}]})").size(), 1u);
  EXPECT_NE(error_of<TokenizerError>([] { grpo::core::chat_messages_from_json(R"([{"role":"user"}])"); })
                .find("messages[0].content: expected a string"),
            std::string::npos);
  EXPECT_NE(error_of<TokenizerError>([] { grpo::core::chat_messages_from_json(R"("hi")"); }).find("expected a messages list"),
            std::string::npos);
}

}  // namespace
}  // namespace grpo::testing

// The renderers against the Jinja sources themselves, rendered by Hugging Face's Jinja
// implementation in node (@huggingface/jinja): Qwen3's own template from its
// tokenizer_config.json, and the sources we write into checkpoints.
namespace grpo::testing {
namespace {

struct ChatCase {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt;
  bool ends_with_user;  // Qwen3's template adds <think> blocks after the last user turn
};

std::vector<ChatCase> chat_cases() {
  const std::string spaced = "  Solve:\n x^2 = 4 \t\n";
  return {
      {{{"user", "What is 2+2?"}}, true, true},
      {{{"system", "You are a careful math tutor."}, {"user", "Prove that sqrt(2) is irrational."}}, true, true},
      {{{"system", "Answer in one word."}, {"user", "Capital of France?"}, {"assistant", "Paris"},
        {"user", "And of Japan? 日本の首都"}},
       true, true},
      {{{"user", spaced}}, true, true},
      {{{"user", "Explain \\frac{a}{b} in LaTeX 🙂"}}, false, true},
      {{{"user", "hi"}, {"assistant", spaced}}, false, false},
  };
}

std::vector<std::string> render_with_jinja(const std::string& tag, const std::vector<nlohmann::json>& cases) {
  const std::string in = tmp_dir() + "/" + tag + "-chat-cases.json";
  const std::string out = tmp_dir() + "/" + tag + "-chat-rendered.json";
  std::ofstream(in, std::ios::binary) << nlohmann::json(cases).dump();
  std::filesystem::remove(out);
  const std::string cmd = "node '" + source_dir() + "/tests/tokenizer/reference_chat.cjs' '" + npm_prefix() + "' '" +
                          in + "' '" + out + "'";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("reference renderer failed: " + cmd);
  std::ifstream f(out, std::ios::binary);
  return nlohmann::json::parse(f).get<std::vector<std::string>>();
}

nlohmann::json case_json(const std::string& jinja, const ChatCase& c) {
  nlohmann::json messages = nlohmann::json::array();
  for (const auto& m : c.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
  return {{"template", jinja},           {"messages", messages},         {"add_generation_prompt", c.add_generation_prompt},
          {"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}};
}

TEST(ChatTemplateJinja, RenderersEqualTheJinjaTemplates) {
  const std::string problem = reference_cache_problem();
  ASSERT_TRUE(problem.empty()) << problem;
  ASSERT_TRUE(std::filesystem::exists(npm_prefix() + "/node_modules/@huggingface/jinja/package.json"))
      << "missing @huggingface/jinja — run scripts/fetch-reference-tokenizers.sh";
  const auto qwen3 = Tokenizer::load(qwen3_dir());
  ASSERT_TRUE(qwen3.chat_template_source().has_value());

  std::vector<nlohmann::json> cases;
  std::vector<std::pair<std::string, std::string>> expected;  // (what, our rendering)
  for (const auto& c : chat_cases()) {
    for (const std::string name : {"chatml", "llama3", "none"}) {
      cases.push_back(case_json(grpo::core::chat_template_jinja(name), c));
      expected.emplace_back(name + " source", render_chat(name, c.messages, c.add_generation_prompt));
    }
    if (c.ends_with_user) {
      cases.push_back(case_json(*qwen3.chat_template_source(), c));
      expected.emplace_back("Qwen3's own template", render_chat("chatml", c.messages, c.add_generation_prompt));
    }
  }
  const auto rendered = render_with_jinja("templates", cases);
  ASSERT_EQ(rendered.size(), expected.size());
  for (std::size_t i = 0; i < rendered.size(); ++i)
    EXPECT_EQ(expected[i].second, rendered[i]) << expected[i].first << ", case " << cases[i]["messages"].dump();
}

}  // namespace
}  // namespace grpo::testing

// The special tokens a template is said to write are the ones it writes (a front end checks
// them against the tokenizer).
TEST(ChatTemplate, SpecialTokensListMatchesTheRendering) {
  using grpo::core::chat_template_special_tokens;
  using grpo::core::ChatMessage;
  using grpo::core::render_chat;
  using grpo::core::TokenizerError;
  const std::vector<ChatMessage> messages = {{"user", "hi"}, {"assistant", "ok"}};
  for (const std::string name : {"chatml", "llama3"}) {
    const std::string text = render_chat(name, messages, /*add_generation_prompt=*/true);
    const auto tokens = chat_template_special_tokens(name);
    EXPECT_FALSE(tokens.empty()) << name;
    for (const auto& t : tokens) EXPECT_NE(text.find(t), std::string::npos) << name << " " << t;
  }
  EXPECT_TRUE(chat_template_special_tokens("none").empty());
  EXPECT_THROW(chat_template_special_tokens("chatm"), TokenizerError);
}
