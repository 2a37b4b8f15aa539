// The cost of tools in the loop (docs/tools.md): a multi-turn rollout on the native engine
// against single-turn generation of the same token count, in one run on the same prompts.
//
//   multi-turn   every sample makes --turns turns of --turn-tokens sampled tokens; after each
//                turn but the last the host's per-call work runs: the turn is decoded and
//                parsed (the legacy parser), the call goes through the tool pool (ToolRunner)
//                to a tool that answers at once, and its output, wrapped as the legacy parser
//                wraps it ("<output>\n...\n</output>\n"), is encoded and appended; the sample was
//                parked with its KV cache meanwhile and resumes with one forward of the
//                appended tokens (the engine's generate_turns path);
//   single-turn  the same prompts, one turn of as many tokens as a multi-turn sample holds
//                (sampled + appended), all sampled.
// Sampled (temperature 1, seeded) with ignore_eos, so every sample has exactly that many tokens. The model: Qwen2-shaped,
// random weights, the CPU demo's size (hidden 256, 4 layers) over a byte-level vocabulary, so
// that turns decode to text. Each variant runs --repeats times, alternating; medians.
//
// Headline: tool_rollout_overhead = multi-turn wall time / single-turn wall time (the issue's
// bound: <= 1.3), then the two walls and the resume time.
//
//   grpo_bench_tool_rollout [--prompts 32] [--turns 4] [--turn-tokens 32] [--max-num-seqs 32]
//                           [--repeats 3] [--threads N]
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cstdio>
#include <map>
#include <random>

#include "bench/bench_common.h"
#include "core/model/transformer.h"
#include "core/runtime/threads.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_files.h"
#include "core/tools/tool_call_parser.h"
#include "core/tools/tool_runner.h"
#include "plugins/backends/native/engine.h"

using namespace grpo;
using grpo::bench::arg;
using grpo::bench::Clock;
using grpo::bench::seconds_since;

namespace {

// A tool that answers at once.
class Instant : public sdk::Tool {
 public:
  std::string description() const override { return "Answers at once."; }
  std::string parameters() const override {
    return R"({"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]})";
  }
  sdk::ToolObservation call(std::string_view, const sdk::ToolCallContext&) const override { return {"1234567890", false, ""}; }
};

// The host's side of a tool rollout with instant tools (see the top comment).
class InstantTools final : public sdk::TurnController {
 public:
  InstantTools(const core::Tokenizer& tokenizer, core::ToolRunner& runner, int turns, std::int64_t turn_tokens)
      : tokenizer_(tokenizer),
        runner_(runner),
        parser_(core::ToolCallFormat::kLegacy, {{"python", nlohmann::ordered_json::parse(tool_->parameters())}}),
        turns_(turns),
        turn_tokens_(turn_tokens) {}

  void turn_ended(const sdk::TurnEnd& end) override {
    std::vector<int> ids;
    for (std::int64_t id : end.output->token_ids) ids.push_back(static_cast<int>(id));
    parsed_calls_ += parser_.parse(tokenizer_.decode(ids)).size();
    if (end.turn + 1 >= turns_) {
      sdk::TurnContinuation c;
      c.request = end.request;
      c.sample = end.sample;
      ready_.push_back(c);
      return;
    }
    core::ToolJob job;
    job.tag = end.request * 4096 + static_cast<std::size_t>(end.sample);
    job.tool = tool_;
    job.tool_name = "python";
    job.arguments = R"j({"code": "print(1)"})j";
    job.trajectory_id = std::to_string(job.tag);
    job.timeout_s = 60;
    runner_.submit(std::move(job));
  }

  std::vector<sdk::TurnContinuation> continuations(bool wait) override {
    for (;;) {
      for (core::ToolOutcome& o : runner_.take(wait && ready_.empty())) {
        sdk::TurnContinuation c;
        c.request = o.tag / 4096;
        c.sample = static_cast<std::int64_t>(o.tag % 4096);
        c.finish = false;
        for (int id : tokenizer_.encode(parser_.wrap_output(o.observation.text))) c.append_ids.push_back(id);
        c.max_new_tokens = turn_tokens_;
        ready_.push_back(std::move(c));
      }
      if (!wait || !ready_.empty()) break;
    }
    return std::exchange(ready_, {});
  }
  std::size_t parsed_calls() const { return parsed_calls_; }

 private:
  std::shared_ptr<Instant> tool_ = std::make_shared<Instant>();
  const core::Tokenizer& tokenizer_;
  core::ToolRunner& runner_;
  core::ToolCallParser parser_;
  int turns_;
  std::int64_t turn_tokens_;
  std::vector<sdk::TurnContinuation> ready_;
  std::size_t parsed_calls_ = 0;
};

}  // namespace

// Long because it is the benchmark's script, read top to bottom: flags, the model and tools, the
// timed rollouts side by side, the `name: value` lines.
int main(int argc, char** argv) {
  // LibTorch's default here is 1 intra-op thread whatever the core count: choose on purpose.
  const std::int64_t threads_flag = arg(argc, argv, "--threads", 0);
  int threads = static_cast<int>(threads_flag);
  if (threads > 0)
    at::set_num_threads(threads);
  else
    threads = core::configure_compute_threads("grpo_bench_tool_rollout");
  const std::int64_t prompts = arg(argc, argv, "--prompts", 32), turns = arg(argc, argv, "--turns", 4),
                     turn_tokens = arg(argc, argv, "--turn-tokens", 32), max_num_seqs = arg(argc, argv, "--max-num-seqs", 32),
                     repeats = arg(argc, argv, "--repeats", 3);
  std::printf("cpu: %s, %d LibTorch threads\n", bench::cpu_model_name().c_str(), threads);
  const core::Tokenizer tokenizer = core::Tokenizer::from_json(core::make_byte_level_tokenizer_json());
  core::ModelConfig c;
  c.architecture = core::ModelArchitecture::Qwen2;
  c.vocab_size = tokenizer.vocab_size();
  c.hidden_size = 256;
  c.intermediate_size = 768;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.head_dim = 32;
  c.max_position_embeddings = 1024;
  c.tie_word_embeddings = true;
  c.qkv_bias = true;
  core::CausalLM model(c);
  model->init_weights(0.02, 1);
  native::EngineOptions options;
  options.max_num_seqs = max_num_seqs;
  options.ignore_eos = true;
  native::Engine engine(model, core::Tokenizer::from_json(core::make_byte_level_tokenizer_json()), std::vector<std::int64_t>{},
                        options);

  std::mt19937_64 rng(7);
  std::vector<sdk::GenerationRequest> requests;
  const std::int64_t observation_tokens =
      static_cast<std::int64_t>(tokenizer.encode(core::ToolCallParser(core::ToolCallFormat::kLegacy, {}).wrap_output("1234567890")).size());
  const std::int64_t total = turns * turn_tokens + (turns - 1) * observation_tokens;
  for (std::int64_t i = 0; i < prompts; ++i) {
    sdk::GenerationRequest r;
    r.id = std::to_string(i);
    const std::int64_t len = 16 + static_cast<std::int64_t>(rng() % 49);
    for (std::int64_t t = 0; t < len; ++t) r.prompt_ids.push_back(3 + static_cast<std::int64_t>(rng() % 250));
    // Sampled (temperature 1, seeded): a random model's greedy text loops, and a loop repeats
    // any stop string; sampled text does not, and the seed makes the first turn reproducible.
    r.sampling.temperature = 1.0;
    r.seed = static_cast<std::uint64_t>(i) + 1;
    requests.push_back(std::move(r));
  }
  std::printf("workload: %lld prompts (16-64 tokens), sampled at temperature 1 (seeded); multi-turn: %lld turns x %lld sampled tokens + %lld "
              "appended observations of %lld tokens = %lld tokens per sample; single-turn: %lld sampled tokens\n",
              static_cast<long long>(prompts), static_cast<long long>(turns), static_cast<long long>(turn_tokens),
              static_cast<long long>(turns - 1), static_cast<long long>(observation_tokens), static_cast<long long>(total),
              static_cast<long long>(total));

  // The first turn ends where a tool call would: at a stop string. With random weights the
  // stop string is taken from each prompt's own (seeded) continuation: the shortest tail of its
  // first turn_tokens tokens (4-8 tokens) that occurs nowhere earlier, so the first turn ends
  // exactly there. Later turns end at the controller's turn limit. The single-turn requests
  // carry a stop string of the same length that never occurs, so both pay the same matching.
  {
    auto probe = requests;
    for (auto& r : probe) r.sampling.max_new_tokens = turn_tokens;
    const auto first = engine.generate(probe);
    std::vector<sdk::GenerationRequest> kept;
    core::DecodeOptions skip;
    skip.skip_special_tokens = true;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const auto& ids = first[i].samples.at(0).token_ids;
      std::vector<int> all(ids.begin(), ids.end());
      const std::string text = tokenizer.decode_bytes(all, skip);
      for (std::size_t k = 4; k <= 8 && k <= ids.size(); ++k) {
        const std::string tail = tokenizer.decode_bytes(std::vector<int>(all.end() - static_cast<std::ptrdiff_t>(k), all.end()), skip);
        if (tail.empty() || text.find(tail) != text.size() - tail.size()) continue;
        // The last token must complete the tail (no shorter prefix of the text holds it).
        if (tokenizer.decode_bytes(std::vector<int>(all.begin(), all.end() - 1), skip).find(tail) != std::string::npos) continue;
        requests[i].sampling.stop_strings = {tail};
        kept.push_back(requests[i]);
        break;
      }
    }
    std::printf("prompts with a first-turn stop string: %zu of %zu\n", kept.size(), requests.size());
    requests = std::move(kept);
  }

  core::ToolRunner runner(4);
  std::vector<double> multi, single, resume;
  std::size_t mismatched = 0;
  for (std::int64_t rep = 0; rep < repeats + 1; ++rep) {  // the first pair warms up
    auto turned = requests;
    for (auto& r : turned) r.sampling.max_new_tokens = total;
    InstantTools controller(tokenizer, runner, static_cast<int>(turns), turn_tokens);
    const auto t0 = Clock::now();
    const auto results = engine.generate(turned, &controller);
    const double m = seconds_since(t0);
    const double r_s = engine.last_stats().resume_s;
    auto plain = requests;
    for (auto& r : plain) {
      r.sampling.max_new_tokens = total;
      r.sampling.stop_strings = {std::string(r.sampling.stop_strings.at(0).size(), '\x01')};
    }
    const auto t1 = Clock::now();
    const auto plain_results = engine.generate(plain);
    const double s = seconds_since(t1);
    for (std::size_t i = 0; i < results.size(); ++i)
      if (static_cast<std::int64_t>(results[i].samples.at(0).token_ids.size()) != total ||
          static_cast<std::int64_t>(plain_results[i].samples.at(0).token_ids.size()) != total)
        ++mismatched;
    if (rep == 0) continue;
    multi.push_back(m);
    single.push_back(s);
    resume.push_back(r_s);
  }
  const double overhead = bench::median(multi) / bench::median(single);
  std::printf("samples with the wrong token count: %zu\n", mismatched);
  std::printf("tool_rollout_overhead: %.3f\n", overhead);
  std::printf("multi_turn_wall_s: %.3f\n", bench::median(multi));
  std::printf("single_turn_wall_s: %.3f\n", bench::median(single));
  std::printf("resume_s: %.3f\n", bench::median(resume));
  return mismatched == 0 ? 0 : 1;
}
