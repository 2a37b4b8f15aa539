// The OpenAI API as grpo-serve speaks it: request bodies of /v1/completions and
// /v1/chat/completions parsed and checked into engine requests, and the response, stream-chunk
// and error bodies built from engine results. No HTTP here (server.h does that), so every rule
// is testable in-process.
//
// Fields follow the OpenAI API reference (docs/serving.md lists them) plus the extensions
// vLLM and SGLang accept: top_k, min_p, stop_token_ids, add_special_tokens, return_token_ids.
// Sampling fields the engine does not implement (penalties, logit_bias, a JSON
// response_format) are refused unless they have their neutral value; other unknown fields are
// ignored, as vLLM and SGLang ignore them.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "grpo/sdk/torch/rollout_backend.h"

namespace grpo::serve {

using json = nlohmann::ordered_json;

// A request the API refuses: the HTTP status and the OpenAI error object's fields.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = "", std::string type = "",
           std::string code = "");
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& type() const { return type_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string param_, type_, code_;
};

// {"error": {"message", "type", "param", "code"}}; param and code null when empty.
json error_body(const ApiError& error);

// What the server serves, as requests see it.
struct ServedModel {
  std::string name;              // the "model" requests must name (/v1/models' id)
  std::int64_t max_model_len = 0;  // prompt + completion tokens
  std::int64_t vocab_size = 0;
};

enum class Endpoint { kCompletions, kChat };

// A checked request: one engine request per prompt, each with `n` samples.
struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::vector<sdk::GenerationRequest> prompts;  // id "<request id>-<i>"; seed set when the body sets one
  std::int64_t n = 1;
  bool logprobs = false;        // the sampled tokens' log-probs in the answer
  bool stream = false;
  bool include_usage = false;   // stream_options.include_usage: a last chunk with usage
  bool return_token_ids = false;  // choices[i].token_ids and prompt_token_ids (vLLM's extension)
};

// Parses a /v1/completions body: prompt (a string, a list of token ids, or a list of either),
// max_tokens (default 16, as OpenAI), temperature, top_p, top_k, min_p, n, stop, seed, logprobs
// (0: the sampled token's log-prob; top alternatives are not computed, so > 0 is refused),
// echo (false only), stream, stream_options, ignore_eos, add_special_tokens (default true, as
// vLLM), return_token_ids, model. Throws ApiError: 400 naming the field, 404 for another model.
ApiRequest parse_completion_request(const std::string& body, const ServedModel& model, const core::Tokenizer& tokenizer,
                                    const std::string& request_id);

// Parses a /v1/chat/completions body: messages (rendered with the chat template; content a
// string or text parts), tools (to the template), max_tokens / max_completion_tokens (default:
// the rest of the context), the sampling fields of completions, logprobs (bool), top_logprobs
// (0 only), chat_template_kwargs. Throws ApiError.
ApiRequest parse_chat_request(const std::string& body, const ServedModel& model, const core::Tokenizer& tokenizer,
                              const core::ChatTemplate& chat_template, const std::string& request_id);

// "stop" | "length"
const char* finish_reason_text(sdk::FinishReason reason);

// The full (non-streamed) answer. `results` has one entry per request.prompts, all ok.
json completion_response(const ApiRequest& request, const std::vector<sdk::GenerationResult>& results,
                         const std::string& id, std::int64_t created, const ServedModel& model,
                         const core::Tokenizer& tokenizer);
json chat_response(const ApiRequest& request, const std::vector<sdk::GenerationResult>& results, const std::string& id,
                   std::int64_t created, const ServedModel& model, const core::Tokenizer& tokenizer);

// {"prompt_tokens", "completion_tokens", "total_tokens"}
json usage_json(const ApiRequest& request, const std::vector<sdk::GenerationResult>& results);

// One stream chunk of choice `index`: a text delta, and on the last one its finish reason
// (chat: the first chunk of a choice carries delta.role).
json completion_chunk(const std::string& id, std::int64_t created, const ServedModel& model, std::int64_t index,
                      const std::string& text, const char* finish_reason);
json chat_chunk(const std::string& id, std::int64_t created, const ServedModel& model, std::int64_t index,
                const json& delta, const char* finish_reason);
// The last chunk when stream_options.include_usage: "choices": [] and the usage.
json usage_chunk(const ApiRequest& request, const std::string& id, std::int64_t created, const ServedModel& model,
                 const json& usage);

}  // namespace grpo::serve
