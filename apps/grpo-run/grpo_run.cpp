#include "apps/grpo-run/grpo_run.h"

#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include <ATen/Parallel.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>

#include "apps/cli/app_common.h"
#include "core/algo/algorithm_settings.h"
#include "core/config/config_loader.h"
#include "core/config/schema.h"
#include "core/config/yaml_loader.h"
#include "core/dist/local_launcher.h"
#include "core/dist/process_group.h"
#include "core/dist/world.h"
#include "core/plugin/plugin_registry.h"
#include "core/runtime/blas_check.h"
#include "core/runtime/components.h"
#include "core/runtime/logging.h"
#include "core/runtime/policy.h"
#include "core/runtime/threads.h"
#include "core/train/trainer.h"
#include "core/train/trainer_setup.h"
#include "core/util/fs.h"
#include "core/util/strings.h"
#include "grpo/sdk/config_view.h"

namespace grpo::cli {

using namespace grpo::core;
namespace po = boost::program_options;

namespace {

constexpr const char* kUsage = R"(Usage: grpo-run [options]

Trains a policy with GRPO as the configuration says (docs/training.md). Configuration precedence:
built-in defaults < --config files (in order; a later file wins) < --set overrides.
Every key is documented in docs/config.md (or: grpo-run --config-reference).

Examples:
  grpo-run --config configs/exact_match.yaml --validate
  grpo-run --config configs/presets/dapo.yaml --validate-fragment   (a preset: what it checks, what it lacks)
  grpo-run --config configs/exact_match.yaml --set run.seed=2 --print-config
  grpo-run --list-plugins
  grpo-run --config configs/quickstart.yaml --nproc 2       (2 data-parallel ranks on this machine)
  torchrun --nproc_per_node 2 --no_python grpo-run --config ...   (docs/distributed.md)

Options)";

// --validate's line for model.lora (nothing without it).
std::string lora_summary(const PolicySpec& policy, const PolicyFiles& files) {
  if (!policy.lora.enabled()) return "";
  std::string line = "lora: r " + std::to_string(policy.lora.r) + ", scaling " + std::to_string(policy.lora.scaling());
  if (!policy.model_path.empty()) {
    const auto targets = select_lora_targets(files.model_config, policy.lora);  // checked by check_policy_files
    line += ", " + std::to_string(targets.size()) + " modules (" + join(short_module_names(targets), ", ") + ")";
  }
  if (!policy.lora.adapter_path.empty()) line += ", continuing " + policy.lora.adapter_path;
  return line + "; the KL reference, if any, is the base with the adapters off\n";
}

const std::string& exit_codes() {
  static const std::string text = exit_codes_help({{kExitOk},
                                                   {kExitInternal},
                                                   {kExitUsage},
                                                   {kExitConfig},
                                                   {kExitPlugin},
                                                   {kExitRuntime},
                                                   {kExitUnavailable},
                                                   {kExitPeerLost}});
  return text;
}

struct Options {
  std::vector<std::string> configs;
  std::vector<std::string> sets;
  std::vector<std::string> plugin_paths;
  std::string log_level;
  bool print_config = false;
  bool validate = false;
  bool validate_fragment = false;  // --validate-fragment: a preset or a part of a job
  bool list_plugins = false;
  bool config_reference = false;
  bool resume = false;
  int nproc = 0;  // 0: not given
  std::vector<std::string> argv;  // as given (--nproc re-runs it without --nproc)
};

// --nproc N: N copies of this command line, without --nproc, as local ranks.
int launch_local_ranks(const Options& opt) {
  if (std::getenv("GRPO_LOCAL_LAUNCH") || std::getenv("WORLD_SIZE") || std::getenv("OMPI_COMM_WORLD_SIZE"))
    throw std::invalid_argument("--nproc spawns its own ranks; it cannot run under another launcher (torchrun, mpirun) "
                                "or inside a --nproc rank");
  std::vector<std::string> child{std::filesystem::read_symlink("/proc/self/exe").string()};
  for (std::size_t i = 1; i < opt.argv.size(); ++i) {
    const std::string& a = opt.argv[i];
    if (a == "--nproc") {
      ++i;
      continue;
    }
    if (a.rfind("--nproc=", 0) == 0) continue;
    child.push_back(a);
  }
  dist::LocalLaunchOptions launch;
  launch.nproc = opt.nproc;
  spdlog::info("launching {} ranks on this machine", opt.nproc);
  return dist::launch_local_ranks(child, launch);
}

void print_plugin_table(const PluginRegistry& registry, std::ostream& os) {
  const auto components = registry.components();
  std::size_t w_name = 4, w_kind = 4, w_version = 7, w_plugin = 6;
  for (const auto& c : components) {
    w_name = std::max(w_name, c.name.size());
    w_kind = std::max(w_kind, std::string(sdk::component_kind_name(c.kind)).size());
    w_version = std::max(w_version, c.plugin_version.size());
    w_plugin = std::max(w_plugin, c.plugin.size());
  }
  auto row = [&](const std::string& a, const std::string& b, const std::string& c, const std::string& d,
                 const std::string& e) {
    os << std::left << std::setw(static_cast<int>(w_name) + 2) << a << std::setw(static_cast<int>(w_kind) + 2) << b
       << std::setw(static_cast<int>(w_version) + 2) << c << std::setw(static_cast<int>(w_plugin) + 2) << d << e << "\n";
  };
  row("NAME", "KIND", "VERSION", "PLUGIN", "FILE");
  for (const auto& c : components) row(c.name, sdk::component_kind_name(c.kind), c.plugin_version, c.plugin, c.file);
  if (components.empty()) os << "(no plugins found)\n";
}

// This process's place in a data-parallel launch (torchrun, Slurm, OpenMPI or --nproc variables).
dist::WorldInfo discover_launch_world(const dist::DistOptions& options) {
  try {
    return dist::discover_world(dist::process_environment(), options.launcher);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error("data-parallel launch (dist.launcher = " + options.launcher + "): " + e.what());
  }
}

// The configuration: defaults -> files -> --set; CLI flags are --set overrides applied last;
// --plugin-path folders are searched before plugins.paths.
sdk::ConfigValue job_config(const Options& opt) {
  sdk::ConfigValue config = load_job_config(opt.configs, opt.sets, opt.log_level, opt.resume);
  if (!opt.plugin_paths.empty()) {
    sdk::ConfigValue* plugins = config.find("plugins");
    sdk::ConfigValue* paths = plugins ? plugins->find("paths") : nullptr;
    if (paths && paths->is_sequence()) {
      std::vector<sdk::ConfigValue> merged;
      for (const auto& p : opt.plugin_paths)
        merged.push_back(sdk::ConfigValue::make_scalar(p, sdk::SourceLocation{"--plugin-path", 0, 0}));
      for (const auto& item : paths->items()) merged.push_back(item);
      paths->items() = std::move(merged);
    }
  }
  fill_rollout_backend_defaults(config);
  return config;
}

// --list-plugins: every component the search path offers, and the files that failed to load.
int list_plugins(PluginRegistry& registry, const sdk::ConfigValue& config) {
  load_configured_plugins(registry, config);
  const auto failures = registry.load_all();
  print_plugin_table(registry, std::cout);
  for (const auto& f : failures) spdlog::error("{}", f.message);
  if (!failures.empty()) {
    spdlog::error("{} plugin file(s) failed to load (listed above)", failures.size());
    return kExitPlugin;
  }
  return kExitOk;
}

// --validate / --validate-fragment: what training checks before its first step, but for
// loading the weights, creating the run directory and meeting the other ranks.
int validate(const Options& opt, const sdk::ConfigValue& config, PluginRegistry& registry) {
  log_blas_status();
  // dist.* errors (e.g. nccl in a CPU build) and, under torchrun / Slurm / mpirun, the world size
  // the checks depend on (groups per rank), as training would see them.
  const dist::WorldInfo world = discover_launch_world(dist::dist_options(config));
  const CheckedTrainingJob job = check_training_job(config, registry, world.world_size, opt.validate_fragment);
  const PolicySpec& policy = job.policy;
  const PolicyFiles& files = job.files;
  std::vector<std::string> names;
  for (const auto& v : job.components.verifiers) names.push_back(v.key_path + "=" + v.name);
  for (const auto& c : job.components.configured_slots()) names.push_back(c);
  std::cout << "config OK: " << (opt.configs.empty() ? std::string("(defaults)") : join(opt.configs, ", ")) << "\n"
            << "components: " << (names.empty() ? std::string("(none configured)") : join(names, ", ")) << "\n"
            << "algorithm: " << describe(job.settings.trainer.algorithm) << "\n"
            << "model: " << (policy.model_path.empty() ? std::string("(none configured)")
                                                       : policy.model_path + " (" + architecture_name(files.model_config.architecture) + ")")
            << "\n"
            << lora_summary(policy, files)
            << "precision: " << precision_name(policy.precision) << " (weights " << policy.dtype << ") on " << policy.device.str()
            << (policy.device.is_cpu() ? " (CPU bf16: " + cpu_bf16_support().describe() + ")" : std::string()) << "\n"
            << "tokenizer: " << (files.tokenizer ? policy.tokenizer_path + " (" + std::to_string(files.tokenizer->vocab_size()) + " ids, chat template " + files.chat_template->origin() + ")"
                                                 : std::string("(none configured)"))
            << "\n"
            << "data: " << (job.prompts.train.examples.empty() ? std::string("(not loaded)")
                                                                : std::to_string(job.prompts.train.examples.size()) + " training rows, " +
                                                                      std::to_string(job.prompts.eval.examples.size()) + " eval rows")
            << "\n";
  // A fragment (a preset, a plugin's options) validates; what it lacks to train is said, with training's words.
  if (!job.missing.empty()) {
    std::cout << "not yet a training job (training would stop at the first of these; the checks that need them were skipped):\n";
    for (const auto& m : job.missing) std::cout << "  " << m << "\n";
  }
  return kExitOk;
}

// The training job on this rank: the run directory (rank 0), the checks --validate runs, the
// weights, the process group, then the trainer. `config` gains this rank's CUDA device.
int train(sdk::ConfigValue& config, PluginRegistry& registry) {
  // Data parallel: which rank this is (torchrun, Slurm, OpenMPI or --nproc variables).
  const dist::DistOptions dist_opts = dist::dist_options(config);
  const dist::WorldInfo world = discover_launch_world(dist_opts);
  if (world.distributed()) {
    set_log_rank(world.rank);
    bind_local_cuda_device(config, world.local_rank);
  }
  // Each rank computes with its share of the cores unless OMP_NUM_THREADS says otherwise
  // (torchrun sets 1); the trainer splits them with the rollout thread when async.
  configure_compute_threads("compute threads", world.distributed() ? world.local_world_size : 1);

  // Prepare the run directory: effective config, then the log file (rank 0). Rank 0 holds the
  // run directory's lock until the job ends (the ranks share the directory).
  std::optional<RunDir> run_dir;
  if (world.rank == 0) run_dir = prepare_run_dir(config);
  log_blas_status();
  // The checks --validate runs, before the weights load.
  CheckedTrainingJob job = check_training_job(config, registry, world.world_size);
  const PolicySpec& policy_config = job.policy;
  spdlog::info("constructed {} verifier(s) and {} other component(s)", job.components.verifiers.size(),
               job.components.configured_slots().size());
  spdlog::info("algorithm: {}", describe(job.settings.trainer.algorithm));
  LoadedPolicy policy = load_policy(policy_config);
  if (policy.model.model) {
    int64_t parameters = 0;
    for (const auto& p : policy.model.model->parameters()) parameters += p.numel();
    spdlog::info("policy: {} from {} ({} parameters, weights {} on {}, train.precision {}{})",
                 architecture_name(policy.model.config.architecture), policy_config.model_path, parameters, policy_config.dtype,
                 policy_config.device.str(), precision_name(policy_config.precision),
                 policy_config.device.is_cpu() ? ", CPU bf16: " + cpu_bf16_support().describe() : std::string());
  }
  if (policy.tokenizer)
    spdlog::info("tokenizer: {} ({} ids), chat template {}", policy_config.tokenizer_path,
                 policy.tokenizer->vocab_size(), policy.chat_template->origin());
  std::unique_ptr<dist::Distributed> distributed;
  if (world.distributed()) distributed = std::make_unique<dist::Distributed>(world, dist_opts, policy_config.device.is_cuda());
  run_training(job, config, policy, distributed.get());
  return kExitOk;
}

// One of grpo-run's modes: the configuration reference, the local multi-rank launch, the
// effective configuration, the plugin list, validation, or training.
int run(const Options& opt) {
  if (opt.config_reference) {
    std::cout << config_reference_markdown();
    return kExitOk;
  }
  sdk::ConfigValue config = job_config(opt);
  // The configuration was checked once here, not N times in the ranks.
  if (opt.nproc > 1) return launch_local_ranks(opt);
  if (opt.print_config) {
    std::cout << to_yaml(config);
    return kExitOk;
  }
  PluginRegistry registry(plugin_search_path(config, opt.configs));
  if (opt.list_plugins) return list_plugins(registry, config);
  if (opt.validate || opt.validate_fragment) return validate(opt, config, registry);
  return train(config, registry);
}

}  // namespace

int grpo_run_main(int argc, char** argv) {
  Options opt;
  opt.argv.assign(argv, argv + argc);
  po::options_description desc(kUsage);
  bool show_help = false, show_version = false;
  // clang-format off
  desc.add_options()
    ("help,h", po::bool_switch(&show_help), "show this help and the exit codes")
    ("version", po::bool_switch(&show_version), "print version and ABI information")
    ("config,c", po::value(&opt.configs)->composing(), "YAML config file; repeatable, later files win")
    ("set,s", po::value(&opt.sets)->composing(), "override a key: --set a.b.c=VALUE (VALUE is YAML); repeatable")
    ("print-config", po::bool_switch(&opt.print_config), "print the effective config as YAML and exit")
    ("validate", po::bool_switch(&opt.validate), "run every check training runs before its first step (settings, run.output_dir, plugins, components, model config and weights' values, tokenizer, data), then exit: 0 only for a configuration that can train, else training's exit code and message")
    ("validate-fragment", po::bool_switch(&opt.validate_fragment), "--validate for a part of a configuration (a preset, a plugin's options): what it names is checked, what it lacks to train is listed, exit 0")
    ("resume", po::bool_switch(&opt.resume), "continue the run in run.output_dir from its latest complete checkpoint; one that cannot be loaded is skipped, with a warning, for the next older one (same as --set run.resume=true)")
    ("resume-from", po::value<std::int64_t>()->value_name("STEP"), "continue the run in run.output_dir from the checkpoint of step STEP, with no fallback (same as --set run.resume_from=STEP)")
    ("list-plugins", po::bool_switch(&opt.list_plugins), "list the components of every plugin on the search path")
    ("plugin-path", po::value(&opt.plugin_paths)->composing(), "a folder searched for plugins before all others; repeatable")
    ("log-level", po::value(&opt.log_level), "trace, debug, info, warn or error (same as --set log.level=...)")
    ("config-reference", po::bool_switch(&opt.config_reference), "print the configuration reference (docs/config.md)")
    ("nproc", po::value(&opt.nproc), "train with N data-parallel ranks on this machine (spawns N processes, torchrun-style; docs/distributed.md)");
  // clang-format on
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
    if (vm.count("nproc") && opt.nproc < 1) throw po::error("--nproc takes a number of ranks >= 1, got " + std::to_string(opt.nproc));
    if (vm.count("resume-from")) {
      const std::int64_t step = vm["resume-from"].as<std::int64_t>();
      if (step < 1) throw po::error("--resume-from takes a checkpoint's step >= 1, got " + std::to_string(step));
      opt.sets.push_back("run.resume_from=" + std::to_string(step));
    }
  } catch (const po::error& e) {
    std::cerr << "grpo-run: " << e.what() << "\nTry 'grpo-run --help'.\n";
    return kExitUsage;
  }
  if (show_help) {
    std::cout << desc << exit_codes();
    return kExitOk;
  }
  if (show_version) {
    std::cout << "grpo-run " << GRPO_VERSION_STRING << " (plugin ABI " << host_abi_string() << ")\n";
    return kExitOk;
  }
  const int modes = int(opt.print_config) + int(opt.validate) + int(opt.validate_fragment) + int(opt.list_plugins) +
                    int(opt.config_reference);
  if (modes > 1) {
    std::cerr << "grpo-run: --print-config, --validate, --validate-fragment, --list-plugins and --config-reference exclude each other\n";
    return kExitUsage;
  }
  if (opt.nproc > 0 && modes > 0) {
    std::cerr << "grpo-run: --nproc only applies to training, not to --print-config, --validate, --validate-fragment, --list-plugins or --config-reference\n";
    return kExitUsage;
  }
  // Everything after the command line is grpo-run's job: a failure that is not a
  // configuration, plugin, data or usage error is a runtime error (5). Logged, so that it
  // also reaches the log file.
  return run_guarded(
      [&] {
        int code = kExitOk;
        run_job([&] { code = run(opt); });
        return code;
      },
      [](const ExitStatus& status) { spdlog::error("{}", status.message); });
}

}  // namespace grpo::cli
