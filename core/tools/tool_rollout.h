// Multi-turn rollouts with tools in the loop (rollout.tools): generation stops at a tool call,
// the host parses it (ToolCallParser), runs the tool on its pool (ToolRunner, concurrently
// across samples, each call under its time limit), appends the observation as tokens the
// policy did not sample and resumes the same sequence, up to rollout.tools.max_calls calls and
// the request's token budget (sampling.max_new_tokens bounds everything after the prompt,
// observations included, as in open-instruct). A turn without a call ends the trajectory.
//
// Two ways to resume, with the same trajectories under greedy decoding:
//   - the backend keeps the sequence (RolloutBackend::generate_turns, ABI 1.2; the native
//     engine parks the sample with its KV cache while the tool runs and feeds only the new
//     tokens on resume);
//   - otherwise (or rollout.tools.reuse_kv_cache: false) the host re-sends prompt + trajectory
//     as a new request after every turn, and the backend recomputes the prefix.
//
// The observation's text: `observation` = "auto" wraps each output as the parser's format does
// (legacy "<output>\n...\n</output>\n"); for hermes with a chat template, the template's own
// tool turn is used (what transformers' apply_chat_template adds for the `tool` messages after
// the assistant's, verl's delta trick), so that the policy reads exactly the format it was
// trained on. Otherwise a text with "{output}" in it is the wrapper.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/runtime/components.h"
#include "core/tools/tool_call_parser.h"
#include "core/tools/tool_runner.h"
#include "core/tools/tool_call_record.h"
#include "grpo/sdk/torch/rollout_backend.h"

namespace grpo::core {

class Tokenizer;
class ChatTemplate;

struct ToolRolloutSettings {
  ToolCallFormat parser = ToolCallFormat::kHermes;
  std::int64_t max_calls = 5;       // per trajectory
  double timeout_s = 10.0;          // per call, unless the tool's entry sets its own
  std::string observation = "auto";
  bool reuse_kv_cache = true;       // false: always resume by recomputing the prefix
  // false: parked samples resume in waves, when the backend has nothing else to decode, all at
  // once and in a fixed order: a run is reproducible bit for bit whatever the tools' timing
  // (the batch a token is computed in never depends on it). true: each resumes as soon as its
  // tools answered (slow tools overlap decoding more; runs are not bit-reproducible).
  bool resume_as_ready = false;
  std::size_t threads = 0;          // tool pool workers (0: ToolRunner's default)
  std::int64_t max_observation_tokens = 512;  // a longer observation is cut to this many tokens
};

// One sample's trajectory: everything after the prompt.
struct Trajectory {
  std::vector<std::int64_t> token_ids;
  std::vector<float> logprobs;           // 0 for observation tokens
  std::vector<std::uint8_t> policy_mask;  // 1: sampled by the policy; 0: an observation token
  std::string text;                      // decoded, special tokens skipped
  sdk::FinishReason finish_reason = sdk::FinishReason::kStop;
  std::vector<ToolCallRecord> calls;
  std::int64_t turns = 0;
  std::int64_t observation_tokens = 0;
};

struct ToolRolloutResult {
  std::string request_id;
  sdk::Status status;
  std::vector<Trajectory> samples;
};

// The scalar figures of one generate() (the per-tool metrics come from the samples:
// tool_metrics in core/train/rollout_worker.h).
struct ToolRolloutStats {
  std::int64_t samples = 0, calls = 0, errors = 0, timeouts = 0, malformed = 0, observation_tokens = 0;
  double tool_seconds = 0.0;  // summed over calls
  double wall_s = 0.0;
  bool resumed_in_backend = false;  // generate_turns was used
};

// What a chat template gets as `tools`: [{"type": "function", "function": {"name",
// "description", "parameters"}}] per tool, in config order (null when there are none).
nlohmann::ordered_json tool_schemas(const std::vector<ToolSlot>& tools);

class ToolRollout {
 public:
  // `tools` and `tokenizer` must outlive this object. `chat_template` (may be null: plain-text
  // prompts) is copied. Throws std::invalid_argument when the tools do not fit the parser (see
  // ToolCallParser) or `observation` is neither "auto" nor a text with "{output}".
  ToolRollout(const std::vector<ToolSlot>& tools, ToolRolloutSettings settings, const Tokenizer& tokenizer,
              const ChatTemplate* chat_template);
  ~ToolRollout();

  const ToolRolloutSettings& settings() const { return settings_; }
  // What the prompt's chat template gets as `tools` (Hugging Face function schemas).
  const nlohmann::ordered_json& tool_schemas() const { return schemas_; }
  // The stop strings a tool rollout adds to the sampling parameters.
  std::vector<std::string> stop_strings() const { return parser_.stop_strings(); }
  const ToolCallParser& parser() const { return parser_; }

  // Generates the requests' samples as trajectories. `metadata[i]` (JSON object text, may be
  // empty) reaches the tools of request i. `supports_turns`: the backend implements
  // generate_turns (ABI 1.2 and RolloutBackend::supports_turns()). A failed request fails alone.
  std::vector<ToolRolloutResult> generate(sdk::RolloutBackend& backend, bool supports_turns,
                                          const std::vector<sdk::GenerationRequest>& requests,
                                          const std::vector<std::string>& metadata);
  const ToolRolloutStats& last_stats() const { return stats_; }

  // The text the policy reads after a turn whose calls returned `outputs`: the chat template's
  // tool turn or the parser's wrapping (see above). `turn_ended_with` is the text of the turn's
  // last token with special tokens kept ("<|im_end|>" when it stopped at EOS).
  std::string observation_text(const std::vector<std::string>& outputs, const std::string& turn_ended_with) const;

 private:
  class Controller;

  const std::vector<ToolSlot>& tools_;
  ToolRolloutSettings settings_;
  const Tokenizer& tokenizer_;
  std::unique_ptr<ChatTemplate> chat_template_;  // null: no template tool turn
  ToolCallParser parser_;
  nlohmann::ordered_json schemas_;
  ToolRunner runner_;
  ToolRolloutStats stats_;
};

// The tool rollout of a configuration: null without tools (`tools`, created by the runtime).
// `settings` are rollout.tools.*; the prompts' chat template (`chat_template`, the
// tokenizer.chat_template setting, resolved against `tokenizer`; none for the `none` template)
// gives the hermes observations their tool turn. Errors as ToolRollout's, as sdk::ConfigError
// naming rollout.tools.parser.
std::unique_ptr<ToolRollout> make_tool_rollout(const std::vector<ToolSlot>& tools, const ToolRolloutSettings& settings,
                                               const std::string& chat_template, const Tokenizer& tokenizer);

}  // namespace grpo::core
