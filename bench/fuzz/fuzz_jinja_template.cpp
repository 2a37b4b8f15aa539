// libFuzzer target: the input bytes are a chat template. Parsing must either succeed or throw
// JinjaError; a parsed template is rendered with a small conversation under tight step and
// output bounds, and must either render or throw JinjaError. Deep nesting and huge inputs are
// errors, never a stack overflow. Build/run: docs/fuzzing.md.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/jinja/jinja.h"

namespace {

const grpo::core::jinja::Value& context() {
  static const grpo::core::jinja::Value ctx = grpo::core::jinja::from_json(nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "What is 2+2? 日本 🙂"},
      {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
      {"role": "tool", "content": "4", "tool_call_id": "c1"},
      {"role": "assistant", "content": "<think>\nsum\n</think>\n\nIt is 4."}
    ],
    "tools": [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "documents": null, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})"));
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  grpo::core::jinja::RenderOptions options;
  options.max_steps = 20000;
  options.max_output_bytes = 1 << 16;
  options.strftime_now = [](const std::string& format) { return format; };
  try {
    const grpo::core::jinja::Template t(source, "fuzz.jinja");
    (void)t.render(context(), options);
  } catch (const grpo::core::jinja::JinjaError&) {
    // expected for invalid or raising templates
  }
  return 0;
}
