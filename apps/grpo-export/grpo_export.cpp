#include "apps/grpo-export/grpo_export.h"

#include <boost/program_options.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "apps/cli/app_common.h"
#include "core/model/checkpoint.h"
#include "core/model/checkpoint_dirs.h"
#include "core/model/lora.h"
#include "core/runtime/policy.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/strings.h"

namespace grpo::cli {

using namespace grpo::core;

namespace {

namespace po = boost::program_options;
namespace fs = std::filesystem;

constexpr const char* kUsage = R"(Usage: grpo-export --merge ADAPTER --output DIR [--base MODEL] [--dtype float32|bfloat16]

Merges a LoRA adapter into its base model and writes the result as a Hugging Face model
folder (config.json, model.safetensors, generation_config.json and the tokenizer files), which
loads like any other: grpo-run's and grpo-eval's model.path, vLLM, transformers.
ADAPTER is a PEFT adapter folder (adapter_config.json + adapter_model.safetensors: a LoRA
checkpoint of grpo-sft or grpo-run, or PEFT's own save_pretrained) or a LoRA run directory
(its newest checkpoint). The base model is adapter_config.json's base_model_name_or_path
unless --base names it; a run directory there means its newest checkpoint, as model.path does.
Each adapted weight becomes W + scaling * B A, computed in float32; the tokenizer comes from
ADAPTER when it holds one, else from the base. DIR must not exist yet, or be an empty folder,
or an earlier export (grpo_export.json beside only the files an export writes), which is then
replaced atomically; any other folder is refused and left untouched. See docs/lora.md.

Options)";

const std::string& exit_codes() {
  static const std::string text = exit_codes_help(
      {{kExitOk, "the merged model was written"},
       {kExitInternal},
       {kExitUsage, "bad command line, or --output names something other than a new folder, an empty one or an earlier export"},
       {kExitConfig, "the adapter or base model is missing or does not fit (another architecture, shape or rank)"},
       {kExitRuntime, "the model folder could not be written"}});
  return text;
}

struct Options {
  std::string adapter, output, base, dtype;
};

// What an export writes beside the model files: its mark on the folder (a later export may
// replace a folder that holds it, and nothing but an export's files) and what was merged.
constexpr const char* kExportRecordFile = "grpo_export.json";

// ADAPTER itself, or the newest checkpoint of a run directory.
std::string adapter_folder(const std::string& given) {
  if (fs::exists(fs::path(given) / kAdapterConfigFile)) return given;
  if (fs::is_directory(given))
    if (const auto latest = latest_checkpoint(given); latest && fs::exists(fs::path(*latest) / kAdapterConfigFile)) return *latest;
  throw AppError(kExitConfig, "--merge " + given + ": not a PEFT adapter folder (no " + kAdapterConfigFile +
                                  ") nor a run directory whose newest checkpoint is one");
}

// The base model folder: `given`, or the newest checkpoint of a run directory (model.path's
// rule, run_directory_checkpoint). `from` names where `given` came from, for the messages.
std::string base_folder(const std::string& given, const std::string& from) {
  const auto latest = run_directory_checkpoint(given);
  if (!latest) return given;
  if (latest->adapter)
    throw AppError(kExitConfig, from + " " + given + " is a LoRA run: its newest checkpoint " + latest->path +
                                    " is a PEFT adapter, not a model; merge that run first (grpo-export --merge " + given +
                                    " --output DIR) and give DIR as the base");
  return latest->path;
}

// The files of an earlier export: its record and what save_model writes.
bool is_export_file(const std::string& name) {
  static const std::set<std::string> names = {kExportRecordFile,      "config.json",         "generation_config.json",
                                              kSafetensorsSingleFile, kSafetensorsIndexFile, "tokenizer.json",
                                              "tokenizer_config.json"};
  static const std::regex shard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  return names.count(name) > 0 || std::regex_match(name, shard);
}

// --output may name nothing yet, an empty folder, or an earlier export, which the save then
// replaces. Anything else holds someone's files (a run directory, a base model, an adapter,
// notes) and is refused, untouched. Checked before any work and again right before the save.
void check_output(const std::string& output, const std::vector<std::string>& inputs) {
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(output, ec);
  if (!fs::exists(status)) return;
  const std::string refused = "--output " + output + " is ";
  const std::string rule = ". Left untouched: grpo-export replaces only an empty folder or an earlier export (" +
                           std::string(kExportRecordFile) + " beside nothing but the files an export writes); choose a new folder";
  if (fs::is_symlink(status)) throw AppError(kExitUsage, refused + "a symbolic link" + rule);
  if (!fs::is_directory(status)) throw AppError(kExitUsage, refused + "a file, not a folder" + rule);
  for (const auto& input : inputs)
    if (fs::equivalent(output, input, ec)) throw AppError(kExitUsage, refused + "a folder being merged (" + input + ")" + rule);
  if (fs::is_directory(checkpoint_root(output), ec))
    throw AppError(kExitUsage, refused + "a run directory (it holds checkpoints/)" + rule);
  bool record = false;
  std::vector<std::string> others;
  fs::directory_iterator entries(output, ec);
  if (ec) throw AppError(kExitUsage, "--output " + output + ": cannot list the folder: " + ec.message());
  for (const auto& entry : entries) {
    const std::string name = entry.path().filename().string();
    if (name == kExportRecordFile) record = true;
    if (!is_export_file(name) || !entry.is_regular_file()) others.push_back(name);
  }
  std::sort(others.begin(), others.end());
  if (others.empty() && (record || fs::is_empty(output, ec))) return;
  if (others.empty())
    throw AppError(kExitUsage, refused + "a model folder grpo-export did not write (no " + kExportRecordFile + ")" + rule);
  if (others.size() > 5) {
    others.resize(5);
    others.push_back("...");
  }
  throw AppError(kExitUsage, refused + "a folder with files an export does not write (" + join(others, ", ") + ")" + rule);
}

// grpo_export.json: what was merged into what.
std::string export_record(const std::string& adapter, const std::string& base, const LoraSettings& lora, torch::Dtype dtype) {
  nlohmann::json j = {{"written_by", "grpo-export"},
                      {"adapter", fs::absolute(adapter).lexically_normal().string()},
                      {"base", fs::absolute(base).lexically_normal().string()},
                      {"r", lora.r},
                      {"lora_alpha", lora.lora_alpha},
                      {"use_rslora", lora.use_rslora},
                      {"dtype", dtype_to_name(dtype)}};
  return j.dump(2) + "\n";
}

int run(const Options& opt) {
  const std::string adapter = adapter_folder(opt.adapter);
  PeftAdapterConfig config;
  try {
    config = read_peft_adapter_config(adapter);
  } catch (const std::exception& e) {
    throw AppError(kExitConfig, e.what());
  }
  const std::string given_base = !opt.base.empty() ? opt.base : config.base_model_name_or_path;
  if (given_base.empty())
    throw AppError(kExitConfig, adapter + "/" + kAdapterConfigFile + " names no base_model_name_or_path: give --base MODEL");
  const std::string base =
      base_folder(given_base, !opt.base.empty() ? "--base" : adapter + "/" + kAdapterConfigFile + ": base_model_name_or_path");
  check_output(opt.output, {adapter, base});
  LoadedModel model;
  std::optional<LoraAdapters> lora;
  try {
    // float32 whatever the base is stored in: the merge is computed at full precision.
    model = load_model(base, torch::kFloat32);
    lora.emplace(model.model, config.settings, 0);
    lora->load_peft_folder(adapter);
  } catch (const std::exception& e) {
    throw AppError(kExitConfig, std::string(e.what()) + " (adapter " + adapter + ", base " + base + ")");
  }
  const std::size_t merged = lora->targets().size();
  lora->merge_into_base();
  SaveOptions options;
  try {
    options.dtype = opt.dtype.empty() ? dtype_from_name(model.config.torch_dtype, base + "/config.json: torch_dtype")
                                      : dtype_from_name(opt.dtype, "--dtype");
  } catch (const std::exception& e) {
    throw AppError(kExitConfig, std::string(e.what()) + " (give --dtype float32 or bfloat16)");
  }
  options.generation_config_json = model.generation_config_json;
  std::optional<Tokenizer> tokenizer;
  const std::string tokenizer_dir = fs::exists(fs::path(adapter) / "tokenizer.json") ? adapter : base;
  if (fs::exists(fs::path(tokenizer_dir) / "tokenizer.json")) {
    try {
      tokenizer = Tokenizer::load(tokenizer_dir);
    } catch (const std::exception& e) {
      throw AppError(kExitConfig, e.what());
    }
    options.tokenizer = &*tokenizer;
  }
  options.extra_files.emplace_back(kExportRecordFile, export_record(adapter, base, config.settings, *options.dtype));
  check_output(opt.output, {adapter, base});  // again: the merge took a while
  try {
    save_model(opt.output, model.model, options);
  } catch (const std::exception& e) {
    throw AppError(kExitRuntime, e.what());
  }
  std::cout << "wrote " << opt.output << ": " << base
            << (base != given_base ? " (the newest checkpoint of the run " + given_base + ")" : std::string())
            << " with the adapter " << adapter << " merged (" << merged << " weights, r " << config.settings.r << ", scaling "
            << config.settings.scaling() << "), "
            << dtype_to_name(*options.dtype) << (tokenizer ? ", tokenizer from " + tokenizer_dir : std::string(", no tokenizer"))
            << "\n";
  return kExitOk;
}

}  // namespace

int grpo_export_main(int argc, char** argv) {
  Options opt;
  po::options_description desc(kUsage);
  bool show_help = false;
  // clang-format off
  desc.add_options()
    ("help,h", po::bool_switch(&show_help), "show this help and the exit codes")
    ("merge,m", po::value(&opt.adapter)->value_name("ADAPTER"), "the PEFT adapter folder (or LoRA run directory) to merge")
    ("output,o", po::value(&opt.output)->value_name("DIR"), "the model folder to write: new, empty, or an earlier export (replaced atomically)")
    ("base,b", po::value(&opt.base)->value_name("MODEL"), "the base model folder or run directory (default: adapter_config.json's base_model_name_or_path)")
    ("dtype", po::value(&opt.dtype)->value_name("D"), "float32 or bfloat16 (default: the base's config.json torch_dtype)");
  // clang-format on
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
    if (show_help) {
      std::cout << desc << exit_codes();
      return kExitOk;
    }
    if (opt.adapter.empty()) throw po::error("--merge ADAPTER is required");
    if (opt.output.empty()) throw po::error("--output DIR is required");
    if (!opt.dtype.empty() && opt.dtype != "float32" && opt.dtype != "bfloat16")
      throw po::error("--dtype takes float32 or bfloat16, got '" + opt.dtype + "'");
  } catch (const po::error& e) {
    return report_usage_error("grpo-export", e.what());
  }
  return run_app_guarded("grpo-export", [&] { return run(opt); });
}

}  // namespace grpo::cli
