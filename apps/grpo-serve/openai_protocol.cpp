#include "apps/grpo-serve/openai_protocol.h"

#include <cmath>
#include <limits>

#include "grpo/sdk/utf8.h"

namespace grpo::serve {

namespace {

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError(400, message, param, "invalid_request_error");
}

json parse_body(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw bad("", "the request body is not valid JSON");
  if (!j.is_object()) throw bad("", std::string("the request body must be a JSON object, got ") + j.type_name());
  return j;
}

const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& j, const char* key, double fallback) {
  const json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_number()) throw bad(key, std::string("'") + key + "' must be a number, got " + v->type_name());
  return v->get<double>();
}

std::int64_t integer(const json& j, const char* key, std::int64_t fallback) {
  const json* v = field(j, key);
  if (!v) return fallback;
  if (v->is_number_integer()) return v->get<std::int64_t>();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<std::int64_t>(d);
  }
  throw bad(key, std::string("'") + key + "' must be an integer, got " + (v->is_number() ? v->dump() : v->type_name()));
}

bool boolean(const json& j, const char* key, bool fallback) {
  const json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_boolean()) throw bad(key, std::string("'") + key + "' must be true or false, got " + v->type_name());
  return v->get<bool>();
}

// model: must name the served model when given (OpenAI requires it; we accept it missing).
void check_model(const json& j, const ServedModel& model) {
  const json* v = field(j, "model");
  if (!v) return;
  if (!v->is_string()) throw bad("model", std::string("'model' must be a string, got ") + v->type_name());
  if (v->get<std::string>() != model.name)
    throw ApiError(404, "The model '" + v->get<std::string>() + "' does not exist; this server serves '" + model.name + "'",
                   "model", "invalid_request_error", "model_not_found");
}

// The sampling fields both endpoints share, checked with the engine's own ranges.
void read_sampling(const json& j, ApiRequest& out, sdk::SamplingParams& s, std::optional<std::uint64_t>& seed) {
  out.n = integer(j, "n", 1);
  if (out.n < 1) throw bad("n", "'n' must be >= 1, got " + std::to_string(out.n));
  if (out.n > 1024) throw bad("n", "'n' must be <= 1024, got " + std::to_string(out.n));
  s.temperature = number(j, "temperature", 1.0);
  s.top_p = number(j, "top_p", 1.0);
  s.top_k = integer(j, "top_k", -1);
  if (s.top_k == 0) s.top_k = -1;  // vLLM: 0 (and -1) disable top-k
  s.min_p = number(j, "min_p", 0.0);
  if (const json* v = field(j, "seed")) {
    if (!v->is_number_integer()) throw bad("seed", std::string("'seed' must be an integer, got ") + v->type_name());
    seed = static_cast<std::uint64_t>(v->get<std::int64_t>());
  }
  if (const json* v = field(j, "stop")) {
    if (v->is_string()) {
      s.stop_strings.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      for (const json& x : *v) {
        if (!x.is_string()) throw bad("stop", "'stop' must be a string or a list of strings");
        s.stop_strings.push_back(x.get<std::string>());
      }
    } else {
      throw bad("stop", std::string("'stop' must be a string or a list of strings, got ") + v->type_name());
    }
  }
  if (const json* v = field(j, "stop_token_ids")) {
    if (!v->is_array()) throw bad("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    for (const json& x : *v) {
      if (!x.is_number_integer()) throw bad("stop_token_ids", "'stop_token_ids' must be a list of token ids");
      s.stop_token_ids.push_back(x.get<std::int64_t>());
    }
  }
  for (const char* key : {"presence_penalty", "frequency_penalty"})
    if (number(j, key, 0.0) != 0.0) throw bad(key, std::string("'") + key + "' is not supported (only 0)");
  if (number(j, "repetition_penalty", 1.0) != 1.0) throw bad("repetition_penalty", "'repetition_penalty' is not supported (only 1)");
  if (const json* v = field(j, "logit_bias"); v && !(v->is_object() && v->empty()))
    throw bad("logit_bias", "'logit_bias' is not supported");
  if (const json* v = field(j, "response_format"); v && !(v->is_object() && v->contains("type") && (*v)["type"] == "text"))
    throw bad("response_format", "only the 'text' response_format is supported");
  if (boolean(j, "ignore_eos", false))
    throw bad("ignore_eos", "'ignore_eos': true is not supported per request; start grpo-serve with --ignore-eos");
  for (const sdk::SamplingProblem& p : sdk::sampling_problems(s, out.n)) {
    const std::string name = p.field == "stop_strings" ? "stop" : p.field == "max_new_tokens" ? "max_tokens" : p.field;
    throw bad(name, "'" + name + "' " + p.message);
  }
  out.stream = boolean(j, "stream", false);
  if (const json* v = field(j, "stream_options")) {
    if (!v->is_object()) throw bad("stream_options", "'stream_options' must be an object");
    out.include_usage = boolean(*v, "include_usage", false);
  }
  out.return_token_ids = boolean(j, "return_token_ids", false);
}

// The context bound: vLLM's message and rule (prompt + max_tokens <= max_model_len).
void check_length(const ApiRequest& r, const ServedModel& model, std::int64_t max_tokens, bool max_tokens_given,
                  const char* param) {
  for (const sdk::GenerationRequest& q : r.prompts) {
    const auto length = static_cast<std::int64_t>(q.prompt_ids.size());
    if (length == 0) throw bad(param, "the prompt is empty (it has no tokens)");
    for (std::int64_t id : q.prompt_ids)
      if (id < 0 || id >= model.vocab_size)
        throw bad("prompt", "token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(model.vocab_size) + ")");
    for (std::int64_t id : q.sampling.stop_token_ids)
      if (id >= model.vocab_size)
        throw bad("stop_token_ids", "token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(model.vocab_size) + ")");
    if (length >= model.max_model_len || (max_tokens_given && length + max_tokens > model.max_model_len))
      throw bad(max_tokens_given ? param : "messages",
                "This model's maximum context length is " + std::to_string(model.max_model_len) +
                    " tokens. However, you requested " + std::to_string(length + (max_tokens_given ? max_tokens : 0)) +
                    " tokens (" + std::to_string(length) + " in the prompt, " + std::to_string(max_tokens_given ? max_tokens : 0) +
                    " in the completion). Please reduce the prompt or the completion length.");
  }
}

std::vector<std::int64_t> encode(const core::Tokenizer& tokenizer, const std::string& text, bool add_special_tokens,
                                 const char* param) {
  core::EncodeOptions options;
  options.add_special_tokens = add_special_tokens;
  try {
    const std::vector<int> ids = tokenizer.encode(text, options);
    return {ids.begin(), ids.end()};
  } catch (const core::TokenizerError& e) {
    throw bad(param, std::string("cannot tokenize the prompt: ") + e.what());
  }
}

std::vector<std::int64_t> token_list(const json& v, const char* param) {
  std::vector<std::int64_t> ids;
  for (const json& x : v) {
    if (!x.is_number_integer()) throw bad(param, "a prompt given as tokens must be a list of integers");
    ids.push_back(x.get<std::int64_t>());
  }
  return ids;
}

// A token's bytes as it decodes alone (part of a character, for a byte-level piece).
std::string token_bytes(const core::Tokenizer& tokenizer, std::int64_t id) {
  if (id < 0 || id >= tokenizer.vocab_size()) return "";
  try {
    return tokenizer.decode_bytes({static_cast<int>(id)});
  } catch (const core::TokenizerError&) {
    return "";
  }
}

std::string token_text(const core::Tokenizer& tokenizer, std::int64_t id) { return sdk::to_valid_utf8(token_bytes(tokenizer, id)); }


// The fields every choice of a full answer ends with: its finish reason and, when asked, the
// token ids (vLLM's return_token_ids).
void finish_choice(json& c, const ApiRequest& request, const sdk::GeneratedSample& s, const std::vector<std::int64_t>& prompt_ids) {
  c["finish_reason"] = finish_reason_text(s.finish_reason);
  if (request.return_token_ids) {
    c["token_ids"] = s.token_ids;
    c["prompt_token_ids"] = prompt_ids;
  }
}

// The fields every answer and chunk starts with, then its choices.
json envelope(const std::string& id, const char* object, std::int64_t created, const ServedModel& model, json choices) {
  json out = json::object();
  out["id"] = id;
  out["object"] = object;
  out["created"] = created;
  out["model"] = model.name;
  out["choices"] = std::move(choices);
  return out;
}

}  // namespace

ApiError::ApiError(int status, const std::string& message, std::string param, std::string type, std::string code)
    : std::runtime_error(message),
      status_(status),
      param_(std::move(param)),
      type_(type.empty() ? (status == 401 ? "authentication_error" : status >= 500 ? "server_error" : "invalid_request_error")
                         : std::move(type)),
      code_(std::move(code)) {}

json error_body(const ApiError& e) {
  json err = json::object();
  err["message"] = e.what();
  err["type"] = e.type();
  err["param"] = e.param().empty() ? json(nullptr) : json(e.param());
  err["code"] = e.code().empty() ? json(nullptr) : json(e.code());
  json body = json::object();
  body["error"] = std::move(err);
  return body;
}

ApiRequest parse_completion_request(const std::string& body, const ServedModel& model, const core::Tokenizer& tokenizer,
                                    const std::string& request_id) {
  const json j = parse_body(body);
  check_model(j, model);
  ApiRequest r;
  r.endpoint = Endpoint::kCompletions;
  sdk::SamplingParams s;
  std::optional<std::uint64_t> seed;
  const std::int64_t max_tokens = integer(j, "max_tokens", 16);
  s.max_new_tokens = max_tokens;
  read_sampling(j, r, s, seed);
  if (const json* v = field(j, "logprobs")) {
    if (!v->is_number_integer()) throw bad("logprobs", std::string("'logprobs' must be an integer, got ") + v->type_name());
    if (v->get<std::int64_t>() != 0)
      throw bad("logprobs", "'logprobs' must be 0 here (the sampled token's log-prob); top alternatives are not computed");
    r.logprobs = true;
  }
  if (boolean(j, "echo", false)) throw bad("echo", "'echo': true is not supported");
  if (field(j, "suffix")) throw bad("suffix", "'suffix' is not supported");
  if (const json* v = field(j, "best_of"); v && !(v->is_number_integer() && v->get<std::int64_t>() == r.n))
    throw bad("best_of", "'best_of' is not supported (leave it out or equal to n)");
  const bool add_special = boolean(j, "add_special_tokens", true);
  const json* prompt = field(j, "prompt");
  if (!prompt) throw bad("prompt", "'prompt' is required");
  std::vector<std::vector<std::int64_t>> prompts;
  if (prompt->is_string()) {
    prompts.push_back(encode(tokenizer, prompt->get<std::string>(), add_special, "prompt"));
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
    prompts.push_back(token_list(*prompt, "prompt"));
  } else if (prompt->is_array() && !prompt->empty()) {
    for (const json& p : *prompt) {
      if (p.is_string()) prompts.push_back(encode(tokenizer, p.get<std::string>(), add_special, "prompt"));
      else if (p.is_array()) prompts.push_back(token_list(p, "prompt"));
      else throw bad("prompt", "'prompt' must be a string, a list of token ids, or a list of either");
    }
  } else {
    throw bad("prompt", "'prompt' must be a non-empty string, a list of token ids, or a list of either");
  }
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    sdk::GenerationRequest q;
    q.id = request_id + "-" + std::to_string(i);
    q.prompt_ids = std::move(prompts[i]);
    q.n = r.n;
    q.sampling = s;
    // A seeded request with several prompts: each prompt its own stream, as vLLM does per prompt.
    if (seed) q.seed = *seed + i;
    r.prompts.push_back(std::move(q));
  }
  check_length(r, model, max_tokens, true, "max_tokens");
  return r;
}

ApiRequest parse_chat_request(const std::string& body, const ServedModel& model, const core::Tokenizer& tokenizer,
                              const core::ChatTemplate& chat_template, const std::string& request_id) {
  const json j = parse_body(body);
  check_model(j, model);
  ApiRequest r;
  r.endpoint = Endpoint::kChat;
  sdk::SamplingParams s;
  std::optional<std::uint64_t> seed;
  const bool max_given = field(j, "max_completion_tokens") || field(j, "max_tokens");
  const char* max_key = field(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  std::int64_t max_tokens = integer(j, max_key, 1);
  s.max_new_tokens = max_tokens;
  read_sampling(j, r, s, seed);
  r.logprobs = boolean(j, "logprobs", false);
  if (integer(j, "top_logprobs", 0) != 0)
    throw bad("top_logprobs", "'top_logprobs' must be 0 here (the sampled token's log-prob); top alternatives are not computed");
  const json* messages = field(j, "messages");
  if (!messages || !messages->is_array() || messages->empty())
    throw bad("messages", "'messages' must be a non-empty list of {\"role\", \"content\"} objects");
  json rendered_messages = json::array();
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw bad(where, where + " must be an object with a string 'role'");
    json copy = m;
    // Content parts: the text ones, joined (a template may also take the list; most expect text).
    if (m.contains("content") && m["content"].is_array()) {
      std::string text;
      for (const json& part : m["content"]) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          throw bad(where + ".content", "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
        text += part["text"].get<std::string>();
      }
      copy["content"] = text;
    } else if (m.contains("content") && !m["content"].is_string() && !m["content"].is_null()) {
      throw bad(where + ".content", where + ".content must be a string or a list of text parts");
    }
    rendered_messages.push_back(std::move(copy));
  }
  core::ChatRenderOptions options;
  if (const json* tools = field(j, "tools")) {
    if (!tools->is_array()) throw bad("tools", "'tools' must be a list of tool schemas");
    options.tools = *tools;
  }
  if (const json* kwargs = field(j, "chat_template_kwargs")) {
    if (!kwargs->is_object()) throw bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    options.variables = *kwargs;
  }
  std::string text;
  try {
    text = chat_template.render_json(rendered_messages, options);
  } catch (const core::TokenizerError& e) {
    throw bad("messages", std::string("the chat template cannot render these messages: ") + e.what());
  }
  sdk::GenerationRequest q;
  q.id = request_id + "-0";
  q.prompt_ids = encode(tokenizer, text, boolean(j, "add_special_tokens", false), "messages");
  q.n = r.n;
  if (!max_given) {  // the rest of the context, as vLLM
    const auto length = static_cast<std::int64_t>(q.prompt_ids.size());
    max_tokens = std::max<std::int64_t>(1, model.max_model_len - length);
    s.max_new_tokens = max_tokens;
  }
  q.sampling = s;
  q.seed = seed;
  r.prompts.push_back(std::move(q));
  check_length(r, model, max_tokens, max_given, max_key);
  return r;
}

const char* finish_reason_text(sdk::FinishReason reason) { return reason == sdk::FinishReason::kLength ? "length" : "stop"; }

json usage_json(const ApiRequest& request, const std::vector<sdk::GenerationResult>& results) {
  std::int64_t prompt_tokens = 0, completion_tokens = 0;
  for (const sdk::GenerationRequest& q : request.prompts) prompt_tokens += static_cast<std::int64_t>(q.prompt_ids.size());
  for (const sdk::GenerationResult& r : results)
    for (const sdk::GeneratedSample& s : r.samples) completion_tokens += static_cast<std::int64_t>(s.token_ids.size());
  json u = json::object();
  u["prompt_tokens"] = prompt_tokens;
  u["completion_tokens"] = completion_tokens;
  u["total_tokens"] = prompt_tokens + completion_tokens;
  return u;
}

json completion_response(const ApiRequest& request, const std::vector<sdk::GenerationResult>& results, const std::string& id,
                         std::int64_t created, const ServedModel& model, const core::Tokenizer& tokenizer) {
  json choices = json::array();
  for (std::size_t p = 0; p < results.size(); ++p) {
    for (std::size_t k = 0; k < results[p].samples.size(); ++k) {
      const sdk::GeneratedSample& s = results[p].samples[k];
      json c = json::object();
      c["index"] = static_cast<std::int64_t>(p * static_cast<std::size_t>(request.n) + k);
      c["text"] = s.text;
      if (request.logprobs) {
        json tokens = json::array(), logprobs = json::array(), offsets = json::array();
        std::int64_t offset = 0;
        for (std::size_t t = 0; t < s.token_ids.size(); ++t) {
          const std::string piece = token_text(tokenizer, s.token_ids[t]);
          tokens.push_back(piece);
          logprobs.push_back(s.logprobs[t]);
          offsets.push_back(offset);
          offset += static_cast<std::int64_t>(piece.size());
        }
        json lp = json::object();
        lp["tokens"] = std::move(tokens);
        lp["token_logprobs"] = std::move(logprobs);
        lp["top_logprobs"] = nullptr;
        lp["text_offset"] = std::move(offsets);
        c["logprobs"] = std::move(lp);
      } else {
        c["logprobs"] = nullptr;
      }
      finish_choice(c, request, s, request.prompts[p].prompt_ids);
      choices.push_back(std::move(c));
    }
  }
  json out = envelope(id, "text_completion", created, model, std::move(choices));
  out["usage"] = usage_json(request, results);
  return out;
}

json chat_response(const ApiRequest& request, const std::vector<sdk::GenerationResult>& results, const std::string& id,
                   std::int64_t created, const ServedModel& model, const core::Tokenizer& tokenizer) {
  json choices = json::array();
  const sdk::GenerationResult& r = results.at(0);
  for (std::size_t k = 0; k < r.samples.size(); ++k) {
    const sdk::GeneratedSample& s = r.samples[k];
    json c = json::object();
    c["index"] = static_cast<std::int64_t>(k);
    json message = json::object();
    message["role"] = "assistant";
    message["content"] = s.text;
    c["message"] = std::move(message);
    if (request.logprobs) {
      json content = json::array();
      for (std::size_t t = 0; t < s.token_ids.size(); ++t) {
        const std::string piece = token_text(tokenizer, s.token_ids[t]);
        json e = json::object();
        e["token"] = piece;
        e["logprob"] = s.logprobs[t];
        json bytes = json::array();
        for (unsigned char b : token_bytes(tokenizer, s.token_ids[t])) bytes.push_back(static_cast<int>(b));
        e["bytes"] = std::move(bytes);
        e["top_logprobs"] = json::array();
        content.push_back(std::move(e));
      }
      json lp = json::object();
      lp["content"] = std::move(content);
      c["logprobs"] = std::move(lp);
    } else {
      c["logprobs"] = nullptr;
    }
    finish_choice(c, request, s, request.prompts[0].prompt_ids);
    choices.push_back(std::move(c));
  }
  json out = envelope(id, "chat.completion", created, model, std::move(choices));
  out["usage"] = usage_json(request, results);
  return out;
}

json completion_chunk(const std::string& id, std::int64_t created, const ServedModel& model, std::int64_t index,
                      const std::string& text, const char* finish_reason) {
  json c = json::object();
  c["index"] = index;
  c["text"] = text;
  c["logprobs"] = nullptr;
  c["finish_reason"] = finish_reason ? json(finish_reason) : json(nullptr);
  return envelope(id, "text_completion", created, model, json::array({std::move(c)}));
}

json chat_chunk(const std::string& id, std::int64_t created, const ServedModel& model, std::int64_t index, const json& delta,
                const char* finish_reason) {
  json c = json::object();
  c["index"] = index;
  c["delta"] = delta;
  c["logprobs"] = nullptr;
  c["finish_reason"] = finish_reason ? json(finish_reason) : json(nullptr);
  return envelope(id, "chat.completion.chunk", created, model, json::array({std::move(c)}));
}

json usage_chunk(const ApiRequest& request, const std::string& id, std::int64_t created, const ServedModel& model,
                 const json& usage) {
  json out = envelope(id, request.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion", created, model,
                      json::array());
  out["usage"] = usage;
  return out;
}

}  // namespace grpo::serve
