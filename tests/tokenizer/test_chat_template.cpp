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

namespace grpo::testing {
namespace {

using grpo::core::ChatMessage;
using grpo::core::render_chat;
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
