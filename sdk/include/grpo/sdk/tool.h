// Tool: a function the policy calls in the middle of a rollout (ABI 1.2). The host parses a
// call out of the generated text, runs it on its tool thread pool and appends the observation
// to the sequence as tokens the policy did not sample (they carry mask 0 in training).
// Torch-free by design, like Verifier: tool plugins link nothing but the C++ standard library.
//
//   class Echo : public grpo::sdk::Tool {
//    public:
//     explicit Echo(const grpo::sdk::ConfigView&) {}
//     std::string description() const override { return "Repeats its text."; }
//     std::string parameters() const override {
//       return R"({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})";
//     }
//     grpo::sdk::ToolObservation call(std::string_view arguments, const grpo::sdk::ToolCallContext&) const override;
//   };
//   GRPO_PLUGIN("echo", "1.0.0", "An echo tool") { registrar.add_tool<Echo>("echo", "Repeats its text"); }
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "grpo/sdk/version.h"

GRPO_SDK_NAMESPACE_BEGIN

struct ToolCallContext {
  // Names the sample (trajectory) the call belongs to, unique within the process for the
  // trajectory's lifetime. A stateful tool keys its per-trajectory state by it and drops that
  // state in end_trajectory().
  std::string_view trajectory_id;
  std::uint32_t call_index = 0;  // 0 for the trajectory's first call
  // The host's limit on this call, in seconds. The host stops waiting then and gives the policy
  // a time-out observation; a tool that runs work elsewhere (a process) should stop it by then.
  double timeout_s = 0.0;
  std::string_view metadata;  // JSON object text: the row's other columns ("{}" when none)
};

struct ToolObservation {
  std::string text;       // what the policy reads (the host wraps it as the parser's format says)
  bool is_error = false;  // the call failed (bad arguments, the program failed): counted per tool
  std::string details;    // JSON object text for logs (exit code, truncation); may be empty
};

// Thread safety: call() is const and must be reentrant: the host calls it concurrently from its
// tool pool on one instance, for different trajectories and (never at once) for the same one.
// Errors: call() may throw; the host turns the exception into an error observation carrying
// the message. A call past its time limit becomes a time-out observation; the host abandons
// the thread (as the verifier pool does) and never takes the run down.
class Tool {
 public:
  virtual ~Tool() = default;
  // What the tool does, for the prompt: the chat template renders it with the name and the
  // parameters (Hugging Face `tools=[{"type": "function", "function": {...}}]`).
  virtual std::string description() const = 0;
  // A JSON Schema object text of the arguments ({"type": "object", "properties": ...,
  // "required": [...]}). A parser that passes the call's body as one string (the legacy
  // `<python>code</python>` style) binds it to the schema's one required string property.
  virtual std::string parameters() const = 0;
  // Runs one call; `arguments` is a JSON object text that the host has checked against the
  // schema's `required` properties and their JSON types.
  virtual ToolObservation call(std::string_view arguments, const ToolCallContext& context) const = 0;
  // The trajectory will make no further calls: release what was kept for it (an interpreter,
  // files). Called once per trajectory that made at least one call, after its last call ended.
  virtual void end_trajectory(std::string_view trajectory_id) const { (void)trajectory_id; }
};

GRPO_SDK_NAMESPACE_END
