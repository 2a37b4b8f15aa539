#include "apps/grpo-sft/grpo_sft.h"

#include <boost/program_options.hpp>

#include <cstdint>
#include <iostream>
#include <optional>

#include "apps/cli/app_common.h"
#include "core/config/yaml_loader.h"
#include "core/model/checkpoint.h"
#include "core/runtime/blas_check.h"
#include "core/runtime/policy.h"
#include "core/runtime/threads.h"
#include "core/train/sft.h"

namespace grpo::cli {

using namespace grpo::core;

namespace {

namespace po = boost::program_options;

constexpr const char* kUsage = R"(Usage: grpo-sft --config FILE.yaml [--config FILE.yaml]... [--set KEY=VALUE]... [options]

Supervised warm start before GRPO: cross-entropy on the completion tokens of prompt +
completion rows (TRL `prompt`/`completion`, or open-instruct `messages` ending with the
assistant's turn), packed like grpo-run's update, AdamW with train.* settings. Writes
RUN_DIR/checkpoints/step_N/ (Hugging Face folders, as grpo-run does), metrics.jsonl, run.log
and effective_config.yaml; grpo-run's model.path may name RUN_DIR (its newest checkpoint).
Keys: sft.* and the train.*, data.*, model.*, run.*, checkpoint.* keys of docs/config.md.

Options)";

const std::string& exit_codes() {
  static const std::string text = exit_codes_help(
      {{kExitOk},
       {kExitInternal},
       {kExitUsage},
       {kExitConfig},
       {kExitRuntime, "runtime error while training (e.g. a checkpoint could not be written)"}});
  return text;
}

struct Options {
  std::vector<std::string> configs, sets;
  std::string log_level;
  bool resume = false, print_config = false;
};

// The policy to train: loaded from model.path, or (sft.init: random) built from its
// config.json alone.
LoadedPolicy sft_policy(const PolicySpec& spec, bool random_init) {
  if (!random_init) return load_policy(spec);
  PolicyFiles files = check_policy_files(spec);
  apply_determinism(spec);
  LoadedPolicy policy;
  policy.tokenizer = std::move(files.tokenizer);
  policy.chat_template = std::move(files.chat_template);
  policy.model.config = files.model_config;
  policy.model.model = CausalLM(files.model_config);
  policy.model.model->to(spec.device, dtype_from_name(spec.dtype, "model.dtype"));
  policy.model.model->set_attention_backend(spec.attention);
  return policy;
}

int run(const Options& opt) {
  const sdk::ConfigValue config = load_job_config(opt.configs, opt.sets, opt.log_level, opt.resume);
  if (opt.print_config) {
    std::cout << to_yaml(config);
    return kExitOk;
  }
  const SftSettings settings = sft_settings(config);  // key errors before anything is written
  // Held until the job ends; I/O failures preparing it are the job's (exit 5), a held lock exit 3.
  std::optional<RunDir> run_dir;
  run_job([&] { run_dir.emplace(prepare_run_dir(config)); });
  configure_compute_threads("compute threads");
  log_blas_status();  // names the thread count just chosen
  const PolicySpec spec = policy_spec(config);
  LoadedPolicy policy = sft_policy(spec, settings.random_init);
  run_job([&] { run_sft(settings, config, policy, spec); });
  return kExitOk;
}

}  // namespace

int grpo_sft_main(int argc, char** argv) {
  Options opt;
  bool show_help = false;
  po::options_description desc(kUsage);
  // clang-format off
  desc.add_options()
    ("help,h", po::bool_switch(&show_help), "show this help and the exit codes")
    ("config,c", po::value(&opt.configs)->composing(), "YAML config file; repeatable, later files win")
    ("set,s", po::value(&opt.sets)->composing(), "override a key: --set a.b.c=VALUE (VALUE is YAML); repeatable")
    ("resume", po::bool_switch(&opt.resume), "continue from the newest complete checkpoint in run.output_dir; one that cannot be loaded is skipped, with a warning, for the next older one")
    ("resume-from", po::value<std::int64_t>()->value_name("STEP"), "continue from the checkpoint of step STEP, with no fallback (same as --set run.resume_from=STEP)")
    ("print-config", po::bool_switch(&opt.print_config), "print the effective config as YAML and exit")
    ("log-level", po::value(&opt.log_level), "trace, debug, info, warn or error");
  // clang-format on
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
    if (vm.count("resume-from")) {
      const std::int64_t step = vm["resume-from"].as<std::int64_t>();
      if (step < 1) throw po::error("--resume-from takes a checkpoint's step >= 1, got " + std::to_string(step));
      opt.sets.push_back("run.resume_from=" + std::to_string(step));
    }
  } catch (const po::error& e) {
    return report_usage_error("grpo-sft", e.what());
  }
  if (show_help) {
    std::cout << desc << exit_codes();
    return kExitOk;
  }
  if (opt.configs.empty() && opt.sets.empty()) return report_usage_error("grpo-sft", "give a --config file");
  return run_app_guarded("grpo-sft", [&] { return run(opt); });
}

}  // namespace grpo::cli
