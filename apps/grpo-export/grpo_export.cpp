#include "apps/grpo-export/grpo_export.h"

#include <boost/program_options.hpp>

#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "apps/cli/app_common.h"
#include "core/model/checkpoint.h"
#include "core/model/checkpoint_dirs.h"
#include "core/model/lora.h"
#include "core/tokenizer/tokenizer.h"

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
unless --base names it. Each adapted weight becomes W + scaling * B A, computed in float32;
the tokenizer comes from ADAPTER when it holds one, else from the base. See docs/lora.md.

Options)";

const std::string& exit_codes() {
  static const std::string text = exit_codes_help(
      {{kExitOk, "the merged model was written"},
       {kExitInternal},
       {kExitUsage},
       {kExitConfig, "the adapter or base model is missing or does not fit (another architecture, shape or rank)"},
       {kExitRuntime, "the model folder could not be written"}});
  return text;
}

struct Options {
  std::string adapter, output, base, dtype;
};

// ADAPTER itself, or the newest checkpoint of a run directory.
std::string adapter_folder(const std::string& given) {
  if (fs::exists(fs::path(given) / kAdapterConfigFile)) return given;
  if (fs::is_directory(given))
    if (const auto latest = latest_checkpoint(given); latest && fs::exists(fs::path(*latest) / kAdapterConfigFile)) return *latest;
  throw AppError(kExitConfig, "--merge " + given + ": not a PEFT adapter folder (no " + kAdapterConfigFile +
                                  ") nor a run directory whose newest checkpoint is one");
}

int run(const Options& opt) {
  const std::string adapter = adapter_folder(opt.adapter);
  PeftAdapterConfig config;
  try {
    config = read_peft_adapter_config(adapter);
  } catch (const std::exception& e) {
    throw AppError(kExitConfig, e.what());
  }
  const std::string base = !opt.base.empty() ? opt.base : config.base_model_name_or_path;
  if (base.empty())
    throw AppError(kExitConfig, adapter + "/" + kAdapterConfigFile + " names no base_model_name_or_path: give --base MODEL");
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
  try {
    save_model(opt.output, model.model, options);
  } catch (const std::exception& e) {
    throw AppError(kExitRuntime, e.what());
  }
  std::cout << "wrote " << opt.output << ": " << base << " with the adapter " << adapter << " merged (" << merged
            << " weights, r " << config.settings.r << ", scaling " << config.settings.scaling() << "), "
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
    ("output,o", po::value(&opt.output)->value_name("DIR"), "the model folder to write (replaced atomically)")
    ("base,b", po::value(&opt.base)->value_name("MODEL"), "the base model folder (default: adapter_config.json's base_model_name_or_path)")
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
