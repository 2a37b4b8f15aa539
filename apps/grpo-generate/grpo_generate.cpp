#include "apps/grpo-generate/grpo_generate.h"

#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <type_traits>

#include "apps/cli/app_common.h"
#include "core/config/config_access.h"
#include "core/config/schema.h"
#include "core/config/yaml_loader.h"
#include "core/model/model_config.h"
#include "core/plugin/plugin_registry.h"
#include "core/runtime/components.h"
#include "core/runtime/logging.h"
#include "core/runtime/threads.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/fs.h"
#include "core/util/strings.h"
#include "grpo/sdk/config_view.h"

namespace grpo::cli {

using namespace grpo::core;

namespace {

using ojson = nlohmann::ordered_json;

std::string format(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, a);
  return buf;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Input

PromptFile read_prompts_jsonl(const std::string& path) {
  PromptFile file;
  const std::string source = path == "-" ? std::string("<stdin>") : path;
  for (const JsonlLine& line : read_jsonl_lines(path, "--input")) {
    auto bad = [&](const std::string& what) { file.errors.push_back(source + ":" + std::to_string(line.line) + ": " + what); };
    ojson j;
    if (std::string problem = parse_json_object(line.text, j); !problem.empty()) {
      bad(problem + " (expected one JSON object per line)");
      continue;
    }
    PromptRecord r;
    r.source = source;
    r.line = line.line;
    if (auto it = j.find("id"); it != j.end()) {
      if (it->is_string())
        r.id = it->get<std::string>();
      else if (it->is_number())
        r.id = it->dump();
      else {
        bad(std::string("\"id\" must be a string or a number, got ") + it->type_name());
        continue;
      }
    } else {
      r.id = std::to_string(line.line);
      ojson with_id = ojson::object();
      with_id["id"] = line.line;
      for (auto& [key, value] : j.items()) with_id[key] = value;
      j = std::move(with_id);
    }
    const bool has_prompt = j.contains("prompt"), has_messages = j.contains("messages");
    if (has_prompt && has_messages) {
      bad("the line has both \"prompt\" and \"messages\"; give one of them");
      continue;
    }
    if (!has_prompt && !has_messages) {
      bad("expected \"prompt\" (a string) or \"messages\" (a list of {\"role\", \"content\"}); the line has neither");
      continue;
    }
    if (has_prompt) {
      const ojson& p = j["prompt"];
      if (!p.is_string()) {
        bad(std::string("\"prompt\" must be a string, got ") + p.type_name());
        continue;
      }
      r.prompt = p.get<std::string>();
      if (r.prompt.empty()) {
        bad("\"prompt\" is empty");
        continue;
      }
    } else {
      const ojson& m = j["messages"];
      if (!m.is_array()) {
        bad(std::string("\"messages\" must be a list [{\"role\": ..., \"content\": ...}, ...], got ") + m.type_name());
        continue;
      }
      if (m.empty()) {
        bad("\"messages\" is empty");
        continue;
      }
      try {
        r.messages = chat_messages_from_json(m.dump());
      } catch (const TokenizerError& e) {
        bad(e.what());
        continue;
      }
      r.is_chat = true;
    }
    r.record_json = j.dump(-1, ' ', false, ojson::error_handler_t::replace);
    file.records.push_back(std::move(r));
  }
  return file;
}

std::string render_prompt(const PromptRecord& record, const ChatTemplate& chat_template) {
  if (!record.is_chat) {
    if (chat_template.builtin_name() == "none") return record.prompt;
    return chat_template.render({ChatMessage{"user", record.prompt, ""}});
  }
  return chat_template.render(record.messages);
}

// ---------------------------------------------------------------------------------------------
// Settings and requests

std::vector<std::pair<std::string, std::string>> generate_settings_problems(const GenerateSettings& s) {
  std::vector<std::pair<std::string, std::string>> out;
  const sdk::SamplingParams& p = s.sampling;
  // The ranges every backend enforces, checked here before anything runs; the block's
  // key for stop strings is `stop`.
  for (const sdk::SamplingProblem& problem : sdk::sampling_problems(p, s.n))
    out.push_back({problem.field == "stop_strings" ? "stop" : problem.field, problem.message});
  if (s.seed < 0) out.push_back({"seed", "must be >= 0, got " + std::to_string(s.seed)});
  if (auto problem = chat_template_spec_problem(s.chat_template)) out.push_back({"chat_template", *problem});
  return out;
}

std::vector<sdk::GenerationRequest> build_generation_requests(const std::vector<PromptRecord>& records,
                                                              const Tokenizer& tokenizer,
                                                              const GenerateSettings& settings,
                                                              std::vector<std::string>& errors) {
  std::vector<sdk::GenerationRequest> requests(records.size());
  ChatTemplate chat_template = ChatTemplate::resolve(settings.chat_template, tokenizer);
  chat_template.set_variables(nlohmann::ordered_json::parse(settings.chat_template_kwargs));
  for (std::size_t i = 0; i < records.size(); ++i) {
    const PromptRecord& r = records[i];
    sdk::GenerationRequest& q = requests[i];
    q.id = r.id;
    q.n = settings.n;
    q.sampling = settings.sampling;
    q.seed = static_cast<std::uint64_t>(settings.seed) + static_cast<std::uint64_t>(i);
    try {
      const std::vector<int> ids = tokenizer.encode(render_prompt(r, chat_template));
      q.prompt_ids.assign(ids.begin(), ids.end());
    } catch (const TokenizerError& e) {
      errors.push_back(r.where() + ": cannot tokenize the prompt: " + e.what());
      continue;
    }
    if (q.prompt_ids.empty()) errors.push_back(r.where() + ": the prompt renders to no tokens");
  }
  return requests;
}

// ---------------------------------------------------------------------------------------------
// Generation

std::string progress_line(const GenerateProgress& p) {
  return "generated " + std::to_string(p.prompts_done) + "/" + std::to_string(p.prompts_total) + " prompts, " +
         std::to_string(p.completion_tokens) + " tokens, " + format("%.1f", p.tokens_per_s()) + " tok/s, elapsed " +
         format("%.1f", p.elapsed_s) + "s";
}

std::vector<sdk::GenerationResult> generate_in_chunks(sdk::RolloutBackend& backend,
                                                      const std::vector<sdk::GenerationRequest>& requests,
                                                      std::size_t chunk_prompts,
                                                      const std::function<void(const GenerateProgress&)>& on_chunk) {
  using Clock = std::chrono::steady_clock;
  const std::size_t total = requests.size();
  const std::size_t chunk = chunk_prompts == 0 ? std::max<std::size_t>(total, 1) : chunk_prompts;
  std::vector<sdk::GenerationResult> results;
  results.reserve(total);
  GenerateProgress progress;
  progress.prompts_total = total;
  progress.chunks = (total + chunk - 1) / chunk;
  const auto t0 = Clock::now();
  for (std::size_t begin = 0; begin < total; begin += chunk) {
    const std::size_t end = std::min(total, begin + chunk);
    const std::vector<sdk::GenerationRequest> part(requests.begin() + static_cast<std::ptrdiff_t>(begin),
                                                   requests.begin() + static_cast<std::ptrdiff_t>(end));
    std::vector<sdk::GenerationResult> got = backend.generate(part);
    if (got.size() != part.size())
      throw std::runtime_error("the backend returned " + std::to_string(got.size()) + " results for " +
                               std::to_string(part.size()) + " requests");
    for (auto& result : got) {
      if (!result.status.is_ok()) ++progress.failed_requests;
      for (const auto& sample : result.samples)
        progress.completion_tokens += static_cast<std::int64_t>(sample.token_ids.size());
      results.push_back(std::move(result));
    }
    progress.prompts_done = end;
    ++progress.chunk;
    progress.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (on_chunk) on_chunk(progress);
  }
  return results;
}

// ---------------------------------------------------------------------------------------------
// Output

const char* finish_reason_name(sdk::FinishReason reason) {
  return reason == sdk::FinishReason::kLength ? "length" : "stop";
}

std::string generation_json_line(const PromptRecord& record, const sdk::GenerationRequest& request,
                                 const sdk::GenerationResult& result) {
  ojson j = record.record_json.empty() ? ojson::object() : ojson::parse(record.record_json);
  for (const char* key : {"completions", "prompt_tokens", "error"}) j.erase(key);
  if (result.status.is_ok()) {
    ojson completions = ojson::array();
    for (const sdk::GeneratedSample& s : result.samples) {
      ojson c = ojson::object();
      c["text"] = s.text;
      c["token_ids"] = s.token_ids;
      c["logprobs"] = s.logprobs;
      c["finish_reason"] = finish_reason_name(s.finish_reason);
      completions.push_back(std::move(c));
    }
    j["completions"] = std::move(completions);
    j["prompt_tokens"] = request.prompt_ids.size();
  } else {
    j["prompt_tokens"] = request.prompt_ids.size();
    j["error"] = result.status.message().empty() ? std::string(sdk::status_code_name(result.status.code()))
                                                 : result.status.message();
  }
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::size_t write_generations_jsonl(const std::string& path, const std::vector<PromptRecord>& records,
                                    const std::vector<sdk::GenerationRequest>& requests,
                                    const std::vector<sdk::GenerationResult>& results) {
  if (records.size() != requests.size() || records.size() != results.size())
    throw std::invalid_argument("write_generations_jsonl: " + std::to_string(records.size()) + " records, " +
                                std::to_string(requests.size()) + " requests and " + std::to_string(results.size()) +
                                " results");
  std::size_t failed = 0;
  auto write = [&](std::FILE* out) {
    for (std::size_t i = 0; i < records.size(); ++i) {
      if (!results[i].status.is_ok()) ++failed;
      const std::string line = generation_json_line(records[i], requests[i], results[i]) + "\n";
      std::fwrite(line.data(), 1, line.size(), out);
    }
  };
  if (path == "-") {
    write(stdout);
    std::fflush(stdout);
  } else {
    atomic_write_file_with(path, write);
  }
  return failed;
}

// ---------------------------------------------------------------------------------------------
// The app

namespace {

namespace po = boost::program_options;

constexpr const char* kApp = "grpo-generate";

constexpr const char* kUsage = R"(Usage: grpo-generate --model DIR --input FILE.jsonl --output FILE.jsonl [options]

Samples completions for a JSONL file of prompts with a rollout backend (default: the native
engine). Each input line is a JSON object with "prompt": "text" or "messages": [{"role": ...,
"content": ...}, ...], an optional "id" (default: the line number) and any other keys, which are
copied to the output. Prompts are rendered with --chat-template (a "prompt" is one user
message) and tokenized with the model folder's tokenizer.json. Each output line holds the input
keys plus "completions": [{"text", "token_ids", "logprobs", "finish_reason"}, ...] and
"prompt_tokens"; a request the backend rejects gets "error" instead of "completions".
Precedence: defaults < the --config file's `generate:` block < flags.

Options)";

const std::string& exit_codes() {
  static const std::string text = exit_codes_help(
      {{kExitOk, "every prompt generated"},
       {kExitInternal},
       {kExitUsage, "bad command line (unknown flag, bad flag value, missing --model/--input file)"},
       {kExitConfig, "invalid configuration (the --config file, a backend option, the model folder or tokenizer)"},
       {kExitPlugin, "plugin error (the backend plugin failed to load, or no backend has that name)"},
       {kExitBadInput, "invalid input lines (each reported as FILE:LINE: reason); nothing is generated or written"},
       {kExitRequestsFailed, "some requests failed: their output lines carry \"error\", the other lines are complete"},
       {kExitGenerationFailed, "the backend failed while generating, or the output could not be written"}});
  return text;
}

struct Options {
  std::string model, input, output, config, log_level = "warn";
  std::vector<std::string> plugin_paths, backend_options;
  std::int64_t chunk_size = 0;
  bool quiet = false;
  po::variables_map vm;
};

// Where each setting came from, for error messages: a config node, or a flag.
struct Origins {
  std::map<std::string, const sdk::ConfigValue*> config;  // key -> node in the generate: block
  std::map<std::string, std::string> flag;               // key -> "--flag" when a flag set it
};

std::vector<std::int64_t> config_int_list(const sdk::ConfigView& view, const std::string& key) {
  const sdk::ConfigValue* v = view.node()->find(key);
  std::vector<std::int64_t> out;
  auto one = [&](const sdk::ConfigValue& item, const std::string& path) {
    item.mark_used();
    std::int64_t x = 0;
    if (!item.is_scalar() || !sdk::detail::parse_int(item.scalar(), &x))
      sdk::ConfigView::fail_at(item, path, "expected an integer, got " + sdk::detail::describe_value(item));
    out.push_back(x);
  };
  if (!v || v->is_null()) return out;
  if (v->is_sequence()) {
    for (std::size_t i = 0; i < v->items().size(); ++i) one(v->items()[i], view.key_path(key) + "[" + std::to_string(i) + "]");
  } else {
    one(*v, view.key_path(key));
  }
  return out;
}

// Reads the `generate:` block of a config file into `settings` and `backend` (a component
// node); unknown keys are errors naming the file, line and key.
void apply_config_file(const sdk::ConfigValue& root, const std::string& path, GenerateSettings& settings,
                       sdk::ConfigValue& backend, Origins& origins) {
  if (root.is_null()) throw sdk::ConfigError(path + ": the file is empty; expected a `generate:` block");
  if (!root.is_map())
    sdk::ConfigView::fail_at(root, "", std::string("expected a map with a `generate:` block, got ") + root.type_description());
  const sdk::ConfigValue* block = root.find("generate");
  if (!block) {
    for (const auto& e : root.entries())
      if (const std::string hint = did_you_mean(e.key, {"generate"}); !hint.empty()) {
        const std::string loc = e.key_location.to_string();
        throw sdk::ConfigError((loc.empty() ? path : loc) + ": unknown key '" + e.key + "'" + hint);
      }
    throw sdk::ConfigError(path + ": no `generate:` block (grpo-generate reads only the `generate:` block of its "
                                  "--config file; other top-level keys are ignored)");
  }
  if (block->is_null()) return;
  if (!block->is_map()) sdk::ConfigView::fail_at(*block, "generate", std::string("expected a map, got ") + block->type_description());
  // Unknown keys and wrong types: the generate.* keys of the configuration schema.
  validate_config_section(*block, "generate");
  for (const auto& e : block->entries()) origins.config[e.key] = &e.value;
  const sdk::ConfigView view(block, "generate");
  sdk::SamplingParams& s = settings.sampling;
  settings.n = view.get_int("n", settings.n);
  s.temperature = view.get_double("temperature", s.temperature);
  s.top_p = view.get_double("top_p", s.top_p);
  s.top_k = view.get_int("top_k", s.top_k);
  s.min_p = view.get_double("min_p", s.min_p);
  s.max_new_tokens = view.get_int("max_new_tokens", s.max_new_tokens);
  settings.seed = view.get_int("seed", settings.seed);
  s.stop_strings = view.get_string_list("stop", s.stop_strings);
  if (view.has("stop_token_ids")) s.stop_token_ids = config_int_list(view, "stop_token_ids");
  settings.chat_template = view.get_string("chat_template", settings.chat_template);
  if (const sdk::ConfigValue* kwargs = block->find("chat_template_kwargs"))
    settings.chat_template_kwargs = config_to_json_text(*kwargs);
  if (const sdk::ConfigValue* b = block->find("backend"); b && !b->is_null()) {
    if (b->is_scalar()) {
      backend = sdk::ConfigValue::make_map(b->location());
      backend.set("name", *b);
    } else if (b->is_map()) {
      component_name(*b, "generate.backend");  // must have a string name
      backend = *b;
    } else {
      sdk::ConfigView::fail_at(*b, "generate.backend",
                               std::string("expected a backend name or a map {name: NAME, ...options}, got ") +
                                   b->type_description());
    }
  }
}

void apply_flags(const Options& opt, GenerateSettings& settings, Origins& origins) {
  const po::variables_map& vm = opt.vm;
  sdk::SamplingParams& s = settings.sampling;
  auto set = [&](const char* flag, const char* key, auto& field) {
    if (!vm.count(flag)) return;
    field = vm[flag].as<std::decay_t<decltype(field)>>();
    origins.flag[key] = std::string("--") + flag;
  };
  set("n", "n", settings.n);
  set("temperature", "temperature", s.temperature);
  set("top-p", "top_p", s.top_p);
  set("top-k", "top_k", s.top_k);
  set("min-p", "min_p", s.min_p);
  set("max-new-tokens", "max_new_tokens", s.max_new_tokens);
  set("seed", "seed", settings.seed);
  set("stop", "stop", s.stop_strings);
  set("stop-token-id", "stop_token_ids", s.stop_token_ids);
  set("chat-template", "chat_template", settings.chat_template);
}

// The first problem of the settings, reported where the value came from: a flag (exit 2) or
// the config file (exit 3, with its file:line).
[[noreturn]] void report_setting_problem(const Origins& origins, const std::string& key, const std::string& message) {
  if (auto f = origins.flag.find(key); f != origins.flag.end()) throw std::invalid_argument(f->second + ": " + message);
  if (auto c = origins.config.find(key); c != origins.config.end())
    sdk::ConfigView::fail_at(*c->second, "generate." + key, message);
  throw std::invalid_argument(key + ": " + message);
}

void check_settings(const GenerateSettings& settings, const Origins& origins) {
  const auto problems = generate_settings_problems(settings);
  if (!problems.empty()) report_setting_problem(origins, problems.front().first, problems.front().second);
}

// The backend's component node: the config's, then --backend (a different name drops the
// config's options), then --backend-option KEY=VALUE, then model = --model.
sdk::ConfigValue backend_node(const Options& opt, sdk::ConfigValue from_config) {
  sdk::ConfigValue node = from_config.is_map() ? std::move(from_config) : sdk::ConfigValue::make_map();
  const sdk::ConfigValue* name = node.find("name");
  if (opt.vm.count("backend") || !name) {
    const bool flag = opt.vm.count("backend") > 0;
    const std::string wanted = flag ? opt.vm["backend"].as<std::string>() : "native";
    if (wanted.empty()) throw std::invalid_argument("--backend: the backend name is empty");
    if (!name || name->scalar() != wanted) node = sdk::ConfigValue::make_map();
    node.set("name", sdk::ConfigValue::make_scalar(wanted, {flag ? "--backend" : "<default>"}));
  }
  for (const std::string& assignment : opt.backend_options) {
    const auto eq = assignment.find('=');
    const std::string key = eq == std::string::npos ? assignment : assignment.substr(0, eq);
    if (eq == std::string::npos || std::string(trim(key)).empty())
      throw std::invalid_argument("--backend-option '" + assignment + "': expected KEY=VALUE");
    if (key == "name") throw std::invalid_argument("--backend-option '" + assignment + "': the backend is chosen with --backend");
    if (key == "model") throw std::invalid_argument("--backend-option '" + assignment + "': the model is given with --model");
    const std::string text = assignment.substr(eq + 1);
    const sdk::SourceLocation where{"--backend-option " + assignment, 0, 0};
    sdk::ConfigValue value = text.empty() ? sdk::ConfigValue::make_null() : parse_yaml(text, "--backend-option " + key);
    relocate(value, where);
    node.set(key, std::move(value), where);
  }
  node.set("model", sdk::ConfigValue::make_scalar(opt.model, {"--model"}), {"--model"});
  return node;
}

// Prompts per generate() call: --chunk-size, else enough prompts for 4 x max_num_seqs samples
// (max_num_seqs from the backend options; 32, the native engine's default, when not set).
std::size_t chunk_prompts(const Options& opt, const sdk::ConfigValue& backend, std::int64_t n) {
  if (opt.chunk_size > 0) return static_cast<std::size_t>(opt.chunk_size);
  std::int64_t slots = 32;
  if (const sdk::ConfigValue* v = backend.find("max_num_seqs"); v && v->is_scalar()) {
    std::int64_t parsed = 0;
    if (sdk::detail::parse_int(v->scalar(), &parsed) && parsed > 0) slots = parsed;
  }
  return static_cast<std::size_t>(std::max<std::int64_t>(1, (4 * slots + n - 1) / std::max<std::int64_t>(1, n)));
}

std::string metric_text(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  return format("%.6g", v);
}

// The settings (defaults -> the config file's generate: block -> flags) and the backend's
// node, checked before anything loads. `origins` points into `config_file`: filled in place,
// never copied or moved.
struct RunSettings {
  sdk::ConfigValue config_file;
  GenerateSettings generate;
  Origins origins;
  sdk::ConfigValue backend;
};

void load_settings(const Options& opt, RunSettings& r) {
  sdk::ConfigValue config_backend;
  if (!opt.config.empty()) {
    r.config_file = load_yaml_file(opt.config);
    apply_config_file(r.config_file, opt.config, r.generate, config_backend, r.origins);
  }
  apply_flags(opt, r.generate, r.origins);
  check_settings(r.generate, r.origins);
  r.backend = backend_node(opt, std::move(config_backend));
}

// The model folder's config.json, read now (cheap), so that a stop token id outside the
// vocabulary is a flag error instead of a failed request on every line.
void check_model_folder(const Options& opt, const RunSettings& r) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(opt.model))
    throw std::invalid_argument("--model '" + opt.model + "': no such folder (expected a Hugging Face model folder)");
  if (!fs::exists(fs::path(opt.model) / "config.json"))
    throw std::invalid_argument("--model '" + opt.model + "': the folder has no config.json");
  ModelConfig model_config;
  try {
    model_config = load_model_config((fs::path(opt.model) / "config.json").string());
  } catch (const std::exception& e) {
    throw sdk::ConfigError(std::string("--model: ") + e.what());
  }
  for (std::int64_t id : r.generate.sampling.stop_token_ids)
    if (id >= model_config.vocab_size)
      report_setting_problem(r.origins, "stop_token_ids",
                             std::to_string(id) + " is outside the model's vocabulary [0, " +
                                 std::to_string(model_config.vocab_size) + ")");
}

// Every invalid input line, reported before anything is generated.
[[noreturn]] void reject_input(const Options& opt, const std::vector<std::string>& errors) {
  for (const auto& e : errors) std::cerr << kApp << ": " << e << "\n";
  throw AppError(kExitBadInput, std::to_string(errors.size()) + " invalid input line(s) in " +
                                    (opt.input == "-" ? std::string("<stdin>") : opt.input) + "; nothing was generated");
}

// The prompts rendered with the chat template and tokenized: one request per input line.
std::vector<sdk::GenerationRequest> prepare_requests(const Options& opt, const RunSettings& r, const PromptFile& prompts) {
  std::string tokenizer_path = opt.model;
  const sdk::ConfigValue* tokenizer_node = r.backend.find("tokenizer");
  if (tokenizer_node && tokenizer_node->is_scalar() && !tokenizer_node->scalar().empty()) tokenizer_path = tokenizer_node->scalar();
  std::optional<Tokenizer> tokenizer;
  try {
    tokenizer.emplace(Tokenizer::load(tokenizer_path));
  } catch (const TokenizerError& e) {
    const std::string where = tokenizer_node ? tokenizer_node->location().to_string() : std::string("--model");
    throw sdk::ConfigError(where + ": tokenizer: " + e.what() +
                           " (grpo-generate tokenizes the prompts itself: the model folder needs a tokenizer.json, "
                           "or give one with --backend-option tokenizer=PATH)");
  }
  try {
    const ChatTemplate chat_template = ChatTemplate::resolve(r.generate.chat_template, *tokenizer);
    if (chat_template.fell_back())
      spdlog::warn("--chat-template auto: {} has no chat template; prompts are rendered with the built-in chatml",
                   tokenizer_path);
    spdlog::info("chat template: {}", chat_template.origin());
  } catch (const TokenizerError& e) {
    throw sdk::ConfigError("--chat-template " + r.generate.chat_template + ": " + e.what());
  }
  std::vector<std::string> token_errors;
  std::vector<sdk::GenerationRequest> requests = build_generation_requests(prompts.records, *tokenizer, r.generate, token_errors);
  if (!token_errors.empty()) reject_input(opt, token_errors);
  spdlog::info("{} prompt(s) from {}, chat template {}", requests.size(), opt.input, r.generate.chat_template);
  return requests;
}

// What the backend gave: the results, the wall time and completion tokens of the last progress
// report, and its metrics() summed over the generate() calls.
struct Generations {
  std::vector<sdk::GenerationResult> results;
  double wall_s = 0.0;
  std::int64_t tokens = 0;
  std::vector<std::pair<std::string, double>> metric_sums;
  std::size_t metric_calls = 0;
};

Generations generate_all(const Options& opt, const RunSettings& r, const std::vector<sdk::GenerationRequest>& requests) {
  Generations g;
  PluginRegistry registry(app_plugin_search_path(sdk::ConfigValue::make_map(),
                                                 opt.config.empty() ? std::vector<std::string>{}
                                                                    : std::vector<std::string>{opt.config},
                                                 opt.plugin_paths));
  const std::string backend_name = r.backend.find("name")->scalar();
  if (requests.empty()) return g;
  auto engine = registry.create<sdk::RolloutBackend>(backend_name, &r.backend, "backend");
  const std::size_t chunk = chunk_prompts(opt, r.backend, r.generate.n);
  spdlog::info("backend {}: {} prompt(s) x {} sample(s), {} prompt(s) per generate() call", backend_name, requests.size(),
               r.generate.n, chunk);
  try {
    g.results = generate_in_chunks(*engine, requests, chunk, [&](const GenerateProgress& p) {
      g.wall_s = p.elapsed_s;
      g.tokens = p.completion_tokens;
      ++g.metric_calls;
      for (const sdk::Metric& m : engine->metrics()) {
        double v = 0.0;
        try {
          if (!m.value.defined() || m.value.numel() != 1) continue;
          v = m.value.item<double>();
        } catch (const std::exception&) {
          continue;
        }
        auto it = std::find_if(g.metric_sums.begin(), g.metric_sums.end(), [&](const auto& e) { return e.first == m.name; });
        if (it == g.metric_sums.end()) g.metric_sums.emplace_back(m.name, v);
        else it->second += v;
      }
      if (!opt.quiet) std::cerr << progress_line(p) << std::endl;
    });
  } catch (const std::exception& e) {
    throw AppError(kExitGenerationFailed, "backend '" + backend_name + "' failed: " + e.what() + "; no output was written");
  }
  return g;
}

// The summary on stderr: counts, speed and the backend's mean metrics.
void print_summary(const Options& opt, const RunSettings& r, std::size_t requests, std::size_t failed, const Generations& g) {
  std::ostringstream summary;
  summary << "prompts: " << requests << "\n"
          << "failed_prompts: " << failed << "\n"
          << "completions: " << (requests - failed) * static_cast<std::size_t>(r.generate.n) << "\n"
          << "completion_tokens: " << g.tokens << "\n"
          << "wall_s: " << format("%.3f", g.wall_s) << "\n"
          << "tokens_per_s: " << format("%.1f", g.wall_s > 0 ? static_cast<double>(g.tokens) / g.wall_s : 0.0) << "\n";
  if (!g.metric_sums.empty()) {
    if (g.metric_calls > 1) summary << "# backend metrics: the mean over its " << g.metric_calls << " generate() calls\n";
    for (const auto& [name, sum] : g.metric_sums)
      summary << name << ": " << metric_text(sum / static_cast<double>(g.metric_calls)) << "\n";
  }
  summary << "output: " << opt.output << "\n";
  std::cerr << summary.str();
}

int run(const Options& opt) {
  init_console_logging(opt.log_level);
  RunSettings settings;
  load_settings(opt, settings);
  check_model_folder(opt, settings);
  configure_compute_threads("compute threads");

  const PromptFile prompts = read_prompts_jsonl(opt.input);
  if (!prompts.errors.empty()) reject_input(opt, prompts.errors);
  const std::vector<sdk::GenerationRequest> requests = prepare_requests(opt, settings, prompts);
  const Generations generations = generate_all(opt, settings, requests);

  std::size_t failed = 0;
  try {
    failed = write_generations_jsonl(opt.output, prompts.records, requests, generations.results);
  } catch (const std::exception& e) {
    throw AppError(kExitGenerationFailed, std::string("cannot write --output: ") + e.what());
  }
  if (!opt.quiet) print_summary(opt, settings, requests.size(), failed, generations);
  if (failed) {
    for (std::size_t i = 0; i < generations.results.size(); ++i)
      if (!generations.results[i].status.is_ok())
        std::cerr << kApp << ": " << prompts.records[i].where() << ": " << generations.results[i].status.message() << "\n";
    std::cerr << kApp << ": " << failed << " of " << requests.size()
              << " request(s) failed (\"error\" in their output lines); the others completed\n";
    return kExitRequestsFailed;
  }
  return kExitOk;
}

}  // namespace

int grpo_generate_main(int argc, char** argv) {
  Options opt;
  po::options_description desc(kUsage);
  bool show_help = false;
  // clang-format off
  desc.add_options()
    ("help,h", po::bool_switch(&show_help), "show this help and the exit codes")
    ("model,m", po::value(&opt.model)->value_name("DIR"), "Hugging Face model folder (config.json, *.safetensors, tokenizer.json); required")
    ("input,i", po::value(&opt.input)->value_name("FILE"), "JSONL file of prompts ('-' = stdin); required")
    ("output,o", po::value(&opt.output)->value_name("FILE"), "JSONL file for the generations, written atomically ('-' = stdout); required")
    ("config,c", po::value(&opt.config)->value_name("FILE"), "YAML file whose `generate:` block sets any of n, temperature, top_p, top_k, "
                                          "min_p, max_new_tokens, seed, stop, stop_token_ids, chat_template and "
                                          "backend ({name: native, ...options}); flags override it")
    ("n", po::value<std::int64_t>()->value_name("N"), "completions per prompt (default 1)")
    ("temperature", po::value<double>()->value_name("T"), "sampling temperature; 0 = greedy (default 1.0)")
    ("top-p", po::value<double>()->value_name("P"), "nucleus sampling: keep the smallest set of tokens with this much probability, in (0, 1] (default 1.0 = off)")
    ("top-k", po::value<std::int64_t>()->value_name("K"), "keep the k most likely tokens; -1 = off (default -1)")
    ("min-p", po::value<double>()->value_name("P"), "drop tokens less likely than min-p x the most likely one, in [0, 1] (default 0 = off)")
    ("max-new-tokens", po::value<std::int64_t>()->value_name("N"), "completion length limit in tokens (default 256)")
    ("seed", po::value<std::int64_t>()->value_name("SEED"), "random seed >= 0; prompt i (0-based, input order) uses seed + i (default 0)")
    ("stop", po::value<std::vector<std::string>>()->composing()->value_name("STR"), "stop string: the completion ends at it and its text is cut before it; repeatable")
    ("stop-token-id", po::value<std::vector<std::int64_t>>()->composing()->value_name("ID"), "stop token id: the completion ends with it (kept); repeatable")
    ("chat-template", po::value<std::string>()->value_name("NAME|PATH"), "auto (default: the model's own template), chatml, llama3, none (prompts tokenized as written) or a Jinja file")
    ("backend", po::value<std::string>()->value_name("NAME"), "rollout backend component (default native)")
    ("backend-option", po::value(&opt.backend_options)->composing()->value_name("KEY=VALUE"), "KEY=VALUE option of the backend (VALUE is YAML), e.g. "
                                                                   "max_num_seqs=16, dtype=bfloat16, logprobs=processed, "
                                                                   "max_model_len=2048, ignore_eos=true; repeatable")
    ("plugin-path", po::value(&opt.plugin_paths)->composing()->value_name("DIR"), "a folder searched for plugins first; repeatable")
    ("chunk-size", po::value(&opt.chunk_size)->value_name("N"), "prompts per generate() call, with a progress line after each "
                                               "(default: 4 x max_num_seqs samples' worth)")
    ("quiet,q", po::bool_switch(&opt.quiet), "no progress lines and no summary on stderr")
    ("log-level", po::value(&opt.log_level)->value_name("LEVEL"), "trace, debug, info, warn or error (default warn)");
  // clang-format on
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).run(), opt.vm);
    po::notify(opt.vm);
    if (show_help) {
      std::cout << desc << exit_codes();
      return kExitOk;
    }
    std::vector<std::string> missing;
    for (const char* flag : {"model", "input", "output"})
      if (!opt.vm.count(flag) || opt.vm[flag].as<std::string>().empty()) missing.push_back(std::string("--") + flag);
    if (!missing.empty()) throw po::error(join(missing, ", ") + (missing.size() == 1 ? " is" : " are") + " required");
    if (opt.chunk_size < 0) throw po::error("--chunk-size must be >= 0 (0 = automatic), got " + std::to_string(opt.chunk_size));
  } catch (const po::error& e) {
    return report_usage_error(kApp, e.what());
  }
  return run_app_guarded(kApp, [&] { return run(opt); });
}

}  // namespace grpo::cli
