#include "apps/grpo-eval/grpo_eval.h"

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>

#include "apps/cli/app_common.h"
#include "core/plugin/plugin_registry.h"
#include "core/runtime/components.h"
#include "core/runtime/policy.h"
#include "core/runtime/threads.h"
#include "core/train/trainer.h"
#include "core/util/fs.h"
#include "grpo/sdk/config_view.h"

namespace grpo::cli {

using namespace grpo::core;

namespace {

namespace po = boost::program_options;

constexpr const char* kUsage = R"(Usage: grpo-eval --config FILE.yaml [--model PATH [--label NAME]]... [options]

Evaluates models on the configuration's held-out split (data.eval) exactly as grpo-run's
evaluations do: the same prompts, verifiers, eval.* settings (greedy by default) and seeds, so
figures of different models are comparable. PATH is a Hugging Face model folder or a run
directory of grpo-sft / grpo-run (its newest checkpoint); without --model, model.path is
evaluated. The metrics are printed side by side, one column per model.

Options)";

const std::string& exit_codes() {
  static const std::string text = exit_codes_help({{kExitOk},
                                                   {kExitInternal},
                                                   {kExitUsage},
                                                   {kExitConfig},
                                                   {kExitPlugin},
                                                   {kExitRuntime, "runtime error while evaluating"}});
  return text;
}

struct Options {
  std::vector<std::string> configs, sets, models, labels, plugin_paths;
  std::string output, samples, log_level;
};

struct ModelResult {
  std::string label, path;
  EvaluationResult result;
};

ModelResult evaluate_model(const Options& opt, const std::string& model, const std::string& label) {
  std::vector<std::string> sets = opt.sets;
  if (!model.empty()) sets.push_back("model.path=" + model);
  sdk::ConfigValue config = load_job_config(opt.configs, sets, opt.log_level, false);
  fill_rollout_backend_defaults(config);
  const PolicySpec spec = policy_spec(config);
  if (spec.model_path.empty()) fail_at_config_key(config, {"model", "path"}, "grpo-eval needs a model: set model.path or give --model");
  const PolicyFiles files = check_policy_files(spec);
  PluginRegistry registry(app_plugin_search_path(config, opt.configs, opt.plugin_paths));
  load_configured_plugins(registry, config);
  RuntimeComponents components = create_components(registry, config);
  ModelResult out;
  out.label = label;
  out.path = spec.model_path;
  // model.lora: the backend loaded the base model; it evaluates base + adapters, merged.
  std::optional<sdk::NamedTensors> lora_weights;
  if (spec.lora.enabled()) {
    if (spec.lora.adapter_path.empty())
      spdlog::warn("model.lora without adapter_path: fresh adapters (B = 0) are the base model, which is what is evaluated");
    PolicySpec on_cpu = spec;  // merged on the host: no second copy of the model on the GPU
    on_cpu.device = torch::kCPU;
    LoadedPolicy policy = load_policy(on_cpu);
    lora_weights = policy.lora->merged_weights();
  }
  out.result = run_evaluation(training_job_settings(config), config, components, *files.tokenizer,
                              lora_weights ? &*lora_weights : nullptr);
  return out;
}

std::string format_value(const std::string& name, double v) {
  char buf[64];
  const bool rate = name.find("rate") != std::string::npos || name.find("pass_at_") != std::string::npos;
  if (rate)
    std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * v);
  else
    std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

void print_table(const std::vector<ModelResult>& results, std::ostream& os) {
  std::vector<std::string> names;
  for (const auto& r : results)
    for (const auto& [name, value] : r.result.metrics)
      if (name.rfind("time/", 0) != 0 && std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  std::size_t w0 = 6;
  for (const auto& n : names) w0 = std::max(w0, n.size());
  std::vector<std::size_t> widths;
  for (const auto& r : results) widths.push_back(std::max<std::size_t>(12, r.label.size()));
  auto cell = [](const std::string& text, std::size_t width) { return text + std::string(width > text.size() ? width - text.size() : 0, ' '); };
  os << cell("metric", w0 + 2);
  for (std::size_t i = 0; i < results.size(); ++i) os << cell(results[i].label, widths[i] + 2);
  os << "\n";
  for (const auto& n : names) {
    os << cell(n, w0 + 2);
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& m = results[i].result.metrics;
      auto it = std::find_if(m.begin(), m.end(), [&](const auto& kv) { return kv.first == n; });
      os << cell(it == m.end() ? "-" : format_value(n, it->second), widths[i] + 2);
    }
    os << "\n";
  }
  for (const auto& r : results) os << r.label << ": " << r.path << "\n";
}

int run(const Options& opt) {
  configure_compute_threads("compute threads");
  std::vector<ModelResult> results;
  const std::vector<std::string> models = opt.models.empty() ? std::vector<std::string>{""} : opt.models;
  for (std::size_t i = 0; i < models.size(); ++i) {
    const std::string label = i < opt.labels.size() ? opt.labels[i] : models.size() == 1 ? "model" : "model " + std::to_string(i + 1);
    run_job([&] { results.push_back(evaluate_model(opt, models[i], label)); },
            "evaluating " + (models[i].empty() ? std::string("model.path") : models[i]) + ": ");
  }
  print_table(results, std::cout);
  if (!opt.output.empty()) {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (const auto& r : results) {
      nlohmann::ordered_json metrics = nlohmann::ordered_json::object();
      for (const auto& [name, value] : r.result.metrics) metrics[name] = value;
      j.push_back({{"label", r.label}, {"model", r.path}, {"metrics", metrics}});
    }
    atomic_write_file(opt.output, j.dump(2) + "\n");
  }
  if (!opt.samples.empty()) {
    std::string text;
    for (const auto& r : results)
      for (const auto& s : r.result.samples)
        text += nlohmann::ordered_json{{"label", r.label}, {"where", s.where}, {"prompt", s.prompt}, {"completion", s.completion},
                                       {"reward", s.reward}, {"correct", s.correct}}.dump() + "\n";
    atomic_write_file(opt.samples, text);
  }
  return kExitOk;
}

}  // namespace

int grpo_eval_main(int argc, char** argv) {
  Options opt;
  bool show_help = false;
  po::options_description desc(kUsage);
  // clang-format off
  desc.add_options()
    ("help,h", po::bool_switch(&show_help), "show this help and the exit codes")
    ("config,c", po::value(&opt.configs)->composing(), "YAML config file; repeatable, later files win")
    ("set,s", po::value(&opt.sets)->composing(), "override a key: --set a.b.c=VALUE (VALUE is YAML); repeatable")
    ("model,m", po::value(&opt.models)->composing(), "a model folder or run directory to evaluate; repeatable (one column each)")
    ("label,l", po::value(&opt.labels)->composing(), "the column name of the --model at the same position")
    ("output,o", po::value(&opt.output), "write the metrics as JSON (atomically)")
    ("samples", po::value(&opt.samples), "write every prompt, completion and reward as JSONL (atomically)")
    ("plugin-path", po::value(&opt.plugin_paths)->composing(), "a folder searched for plugins first; repeatable")
    ("log-level", po::value(&opt.log_level), "trace, debug, info, warn or error");
  // clang-format on
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
    if (opt.labels.size() > opt.models.size()) throw po::error("more --label than --model options");
  } catch (const po::error& e) {
    return report_usage_error("grpo-eval", e.what());
  }
  if (show_help) {
    std::cout << desc << exit_codes();
    return kExitOk;
  }
  return run_app_guarded("grpo-eval", [&] { return run(opt); });
}

}  // namespace grpo::cli
