// grpo-generate: samples completions for a JSONL file of prompts with a rollout backend plugin
// (`native` by default), for trying a checkpoint by hand (docs/cli.md#grpo-generate).
//
// The steps are separate functions so that the evaluator reuses them:
//   read_prompts_jsonl        JSONL lines -> PromptRecords (every invalid line reported as FILE:LINE)
//   build_generation_requests PromptRecords + tokenizer + settings -> sdk::GenerationRequests
//   generate_in_chunks        the backend's generate() over chunks of requests, with progress
//   write_generations_jsonl   input keys + "completions" / "prompt_tokens" (or "error"), atomically
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/tokenizer/chat_template.h"
#include "grpo/sdk/torch/rollout_backend.h"

namespace grpo::core {
class Tokenizer;
}  // namespace grpo::core

namespace grpo::cli {

// One prompt of an input file.
struct PromptRecord {
  std::string source;  // the file it came from, for messages
  std::size_t line = 0;  // 1-based line number (blank lines count)
  std::string id;        // the request id: the "id" value (a string as is, a number as written), else the line number
  // The input object as JSON text, keys in input order; when the line had no "id", "id": LINE
  // is added first. Every key of it is copied to the output line.
  std::string record_json;
  bool is_chat = false;               // true: `messages` was given; false: `prompt`
  std::string prompt;                 // "prompt"
  std::vector<core::ChatMessage> messages;  // "messages"

  std::string where() const { return source + ":" + std::to_string(line); }
};

struct PromptFile {
  std::vector<PromptRecord> records;  // the valid lines, in input order
  std::vector<std::string> errors;    // "FILE:LINE: reason", one per invalid line, in order
};

// Reads a JSONL file of prompts ("-" = stdin); blank lines are skipped. Each line is a JSON
// object with exactly one of
//   "prompt": "text"                                        (non-empty)
//   "messages": [{"role": "...", "content": "..."}, ...]   (non-empty)
// an optional "id" (a string or a number) and any other keys (carried to the output).
// Invalid lines go to `errors` ("in.jsonl:3: expected \"prompt\" (a string) or \"messages\"
// (a list of {role, content}); the line has neither"); the others are still read.
// Throws std::invalid_argument "cannot open --input 'PATH'".
PromptFile read_prompts_jsonl(const std::string& path);

// The text the tokenizer sees: `messages`, or `prompt` as one user message, rendered with the
// chat template (core/tokenizer/chat_template.h) with the generation prompt appended; with the
// built-in "none" the contents are concatenated as they are (a prompt string is used as is).
std::string render_prompt(const PromptRecord& record, const core::ChatTemplate& chat_template);

// What is asked of every prompt (defaults = grpo-generate's defaults).
struct GenerateSettings {
  std::int64_t n = 1;            // completions per prompt
  sdk::SamplingParams sampling;  // temperature 1 (0 = greedy), top_p 1, top_k -1, min_p 0, max_new_tokens 256
  std::int64_t seed = 0;         // request i (0-based, input order) gets seed + i
  std::string chat_template = "auto";  // as tokenizer.chat_template: auto, a built-in name or a .jinja file
  std::string chat_template_kwargs = "{}";  // more template variables (JSON object text)
};

// The problems of `settings`, each as {key, message}, with the key as in a config file's
// `generate:` block ("top_p", "n", "stop", "chat_template", ...) and the message without it
// ("must be in (0, 1], got 1.5"). Empty when every value is in range.
std::vector<std::pair<std::string, std::string>> generate_settings_problems(const GenerateSettings& settings);

// One request per record, in order: id = record.id, prompt_ids = the tokens of
// render_prompt(record) with settings.chat_template resolved against `tokenizer` (throws
// TokenizerError when it does not resolve; no special tokens added: templates render BOS
// themselves), n,
// sampling, seed = settings.seed + index. A record whose prompt cannot be tokenized, or
// renders to no tokens, gets empty prompt_ids and an entry "FILE:LINE: reason" in `errors`.
std::vector<sdk::GenerationRequest> build_generation_requests(const std::vector<PromptRecord>& records,
                                                              const core::Tokenizer& tokenizer,
                                                              const GenerateSettings& settings,
                                                              std::vector<std::string>& errors);

// After each chunk of generate_in_chunks.
struct GenerateProgress {
  std::size_t prompts_done = 0, prompts_total = 0;
  std::size_t failed_requests = 0;      // so far
  std::int64_t completion_tokens = 0;   // so far, every sample of every prompt
  std::size_t chunk = 0, chunks = 0;    // 1-based index of the chunk just finished, and how many there are
  double elapsed_s = 0.0;               // since the first chunk started
  double tokens_per_s() const { return elapsed_s > 0.0 ? static_cast<double>(completion_tokens) / elapsed_s : 0.0; }
};

// "generated 64/200 prompts, 1234 tokens, 56.7 tok/s, elapsed 12.3s"
std::string progress_line(const GenerateProgress& progress);

// Calls backend.generate() on consecutive chunks of `chunk_prompts` requests (0 = all at
// once) and `on_chunk` after each; returns one result per request, in order. A request the
// backend rejects fails alone (its result's status); exceptions of the backend propagate.
std::vector<sdk::GenerationResult> generate_in_chunks(sdk::RolloutBackend& backend,
                                                      const std::vector<sdk::GenerationRequest>& requests,
                                                      std::size_t chunk_prompts,
                                                      const std::function<void(const GenerateProgress&)>& on_chunk = {});

// "stop" | "length"
const char* finish_reason_name(sdk::FinishReason reason);

// The output line of one prompt (no newline): every key of record.record_json, then
// "completions": [{"text", "token_ids", "logprobs", "finish_reason"}, ...] and
// "prompt_tokens", or, when the request failed, "prompt_tokens" and "error": "<message>".
// Input keys named "completions", "prompt_tokens" or "error" are replaced.
std::string generation_json_line(const PromptRecord& record, const sdk::GenerationRequest& request,
                                  const sdk::GenerationResult& result);

// Writes one line per record (generation_json_line), in order, atomically (temp file +
// rename: a failed run never leaves a half-written file); "-" writes to stdout. The three
// vectors are parallel. Returns how many requests failed. Throws std::runtime_error naming the
// path when the file cannot be written, std::invalid_argument when the sizes differ.
std::size_t write_generations_jsonl(const std::string& path, const std::vector<PromptRecord>& records,
                                    const std::vector<sdk::GenerationRequest>& requests,
                                    const std::vector<sdk::GenerationResult>& results);

// Exit codes: apps/cli/exit_codes.h (docs/cli.md#grpo-generate says which).
int grpo_generate_main(int argc, char** argv);

}  // namespace grpo::cli
