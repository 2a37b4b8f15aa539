// Chat templates: the built-in names, with expected strings derived by hand from the Jinja
// sources quoted below, and ChatTemplate's resolution (auto, files, tool_use, errors). Parity
// of the Jinja engine with jinja2 and @huggingface/jinja: test_jinja_parity.cpp.
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
#include "core/tokenizer/tokenizer_files.h"
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

// ChatTemplate::resolve: which template, which variables, which errors. Expected strings are
// written by hand from the small templates in each test.
namespace grpo::testing {
namespace {

using grpo::core::ChatRenderOptions;
using grpo::core::ChatTemplate;

// A tokenizer folder: the demo tokenizer.json, `config` as tokenizer_config.json and, when
// given, `jinja` as chat_template.jinja.
std::string tokenizer_folder(const std::string& name, const std::string& config, const std::string& jinja = "") {
  const std::string dir = tmp_dir() + "/resolve-" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << grpo::core::make_byte_level_tokenizer_json();
  std::ofstream(dir + "/tokenizer_config.json") << config;
  if (!jinja.empty()) std::ofstream(dir + "/chat_template.jinja") << jinja;
  return dir;
}

TEST(ChatTemplateResolve, AutoRendersTheTokenizersTemplateWithItsSpecialTokens) {
  const std::string dir = tokenizer_folder(
      "auto", R"({"bos_token": {"content": "<|endoftext|>", "lstrip": false}, "eos_token": "<|im_end|>",
                  "unk_token": "<unk>", "additional_special_tokens": ["<a>", "<b>"],
                  "chat_template": "{{ bos_token }}|{{ eos_token }}|{{ unk_token }}|{{ additional_special_tokens|join(',') }}|{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}{% if add_generation_prompt %}GO{% endif %}"})");
  const Tokenizer tok = Tokenizer::load(dir);
  const ChatTemplate t = ChatTemplate::resolve("auto", tok);
  EXPECT_FALSE(t.fell_back());
  EXPECT_EQ(t.origin(), dir + "/tokenizer_config.json: chat_template");
  EXPECT_EQ(t.render({{"user", "hi", ""}}), "<|endoftext|>|<|im_end|>|<unk>|<a>,<b>|user:hi;GO");
  ChatRenderOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  EXPECT_EQ(t.render({{"user", "hi", ""}, {"assistant", "yo", ""}}, no_prompt),
            "<|endoftext|>|<|im_end|>|<unk>|<a>,<b>|user:hi;assistant:yo;");
  // Variables win over the special tokens (transformers: {**special_tokens_map, **kwargs}).
  ChatRenderOptions vars;
  vars.variables = {{"bos_token", "B"}, {"unk_token", nullptr}};
  EXPECT_EQ(t.render({}, vars), "B|<|im_end|>|None|<a>,<b>|GO");
}

TEST(ChatTemplateResolve, ChatTemplateJinjaWinsOverTokenizerConfig) {
  const std::string dir = tokenizer_folder("jinja-file", R"({"chat_template": "from config"})", "from file {{ messages|length }}\n");
  const ChatTemplate t = ChatTemplate::resolve("auto", Tokenizer::load(dir));
  EXPECT_EQ(t.origin(), dir + "/chat_template.jinja");
  EXPECT_EQ(t.render({{"user", "a", ""}, {"user", "b", ""}}), "from file 2");  // the trailing newline is dropped
  ASSERT_EQ(t.sources().size(), 1u);
  EXPECT_EQ(t.sources()[0].source, "from file {{ messages|length }}\n");
}

TEST(ChatTemplateResolve, ToolUseTemplateIsPickedWhenToolsArePassed) {
  const std::string dir = tokenizer_folder(
      "tool-use", R"({"chat_template": [{"name": "default", "template": "D{{ tools is none }}"},
                                        {"name": "tool_use", "template": "T{{ tools|length }}{{ tools[0].function.name }}"}]})");
  const ChatTemplate t = ChatTemplate::resolve("auto", Tokenizer::load(dir));
  EXPECT_EQ(t.render({}), "DTrue");  // tools is passed as None, as transformers does
  ChatRenderOptions with_tools;
  with_tools.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather"}}])");
  EXPECT_EQ(t.render({}, with_tools), "T1get_weather");
  EXPECT_EQ(t.sources().size(), 2u);
}

TEST(ChatTemplateResolve, MessageFieldsBesidesContentReachTheTemplate) {
  const ChatTemplate t = ChatTemplate::from_source(
      "{% for m in messages %}{{ m.role }}{% if m.tool_calls %}[{{ m.tool_calls[0].function.name }}({{ "
      "m.tool_calls[0].function.arguments|tojson }})]{% endif %}{% if m.content is none %}<none>{% else %}{{ m.content }}{% endif %};{% endfor %}",
      "t.jinja");
  const auto messages = grpo::core::chat_messages_from_json(
      R"([{"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": "é"}}}]},
          {"role": "tool", "content": "42", "tool_call_id": "c1"}])");
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(t.render(messages), R"(assistant[f({"b": 1, "a": "é"})]<none>;tool42;)");
}

TEST(ChatTemplateResolve, AutoWithoutATemplateFallsBackToChatml) {
  const Tokenizer demo = Tokenizer::from_json(grpo::core::make_byte_level_tokenizer_json());
  const ChatTemplate t = ChatTemplate::resolve("auto", demo);
  EXPECT_TRUE(t.fell_back());
  EXPECT_EQ(t.render({{"user", "hi", ""}}), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  // ... unless the tokenizer lacks chatml's tokens.
  const Tokenizer bare = Tokenizer::from_json(grpo::core::make_byte_level_tokenizer_json({}));
  EXPECT_NE(error_of<TokenizerError>([&] { ChatTemplate::resolve("auto", bare); })
                .find("auto: the tokenizer has no chat template (no chat_template.jinja, no chat_template in "
                      "tokenizer_config.json), and the chat template 'chatml' writes <|im_start|>, <|im_end|>"),
            std::string::npos);
}

TEST(ChatTemplateResolve, ErrorsNameTheFileAndLine) {
  const Tokenizer demo = Tokenizer::from_json(grpo::core::make_byte_level_tokenizer_json());
  const std::string dir = tmp_dir() + "/resolve-errors";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/syntax.jinja") << "line 1\n{% for m in messages %}\n{{ m.content | frobnicate }}\n{% endfor %}\n";
  EXPECT_NE(error_of<TokenizerError>([&] { ChatTemplate::resolve(dir + "/syntax.jinja", demo); })
                .find(dir + "/syntax.jinja:3: unknown filter 'frobnicate'"),
            std::string::npos);
  std::ofstream(dir + "/unclosed.jinja") << "{% if true %}\nx\n";
  EXPECT_NE(error_of<TokenizerError>([&] { ChatTemplate::resolve(dir + "/unclosed.jinja", demo); })
                .find("expected '{% endif %}'"),
            std::string::npos);
  std::ofstream(dir + "/raises.jinja")
      << "{% if messages[0].role != 'system' %}\n{{ raise_exception('Conversations must start with a system message.') }}\n{% endif %}";
  const ChatTemplate raises = ChatTemplate::resolve(dir + "/raises.jinja", demo);
  EXPECT_EQ(raises.render({{"system", "s", ""}}), "");
  EXPECT_EQ(error_of<TokenizerError>([&] { raises.render({{"user", "u", ""}}); }),
            "the chat template raised an error: Conversations must start with a system message. (" + dir +
                "/raises.jinja:2)");
  std::ofstream(dir + "/include.jinja") << "a\n\n{% include 'other.jinja' %}";
  EXPECT_NE(error_of<TokenizerError>([&] { ChatTemplate::resolve(dir + "/include.jinja", demo); })
                .find("include.jinja:3: '{% include %}' is not supported in chat templates"),
            std::string::npos);
  EXPECT_NE(error_of<TokenizerError>([&] { ChatTemplate::resolve(dir + "/missing.jinja", demo); })
                .find("chat template file '" + dir + "/missing.jinja' does not exist"),
            std::string::npos);
  EXPECT_NE(error_of<TokenizerError>([&] { ChatTemplate::resolve("chatlm", demo); }).find("did you mean 'chatml'"),
            std::string::npos);
}

}  // namespace
}  // namespace grpo::testing
