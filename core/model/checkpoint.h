// A Hugging Face model folder, both ways: config.json, model.safetensors (sharded with
// model.safetensors.index.json above a size threshold), generation_config.json and the
// tokenizer files, i.e. a folder AutoModelForCausalLM.from_pretrained and
// AutoTokenizer.from_pretrained load (docs/models.md lists what is written).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/model/model_config.h"
#include "core/model/safetensors_torch.h"
#include "core/model/transformer.h"
#include "core/tokenizer/tokenizer.h"

namespace grpo::core {

class Tokenizer;

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LoadedModel {
  ModelConfig config;
  CausalLM model{nullptr};
  std::string generation_config_json;  // generation_config.json text, "" when absent
};

// Reads DIR/config.json and the weights (model.safetensors or the sharded index) into a
// model of `dtype` on `device`. Every parameter must be present with its shape; unexpected
// tensors are an error (they mean the file is not the architecture config.json names),
// except lm_head.weight of a tied model and rotary inv_freq buffers of old checkpoints.
LoadedModel load_model(const std::string& dir, torch::Dtype dtype = torch::kFloat32,
                       torch::Device device = torch::kCPU);

// Copies `tensors` into `model`'s parameters with the rules of load_model. `source` names
// the file or folder in errors. Everything is checked before the first copy: on an error the
// model is unchanged.
void load_model_weights(CausalLM& model, const NamedTensorList& tensors, const std::string& source);

// The tensors a save writes, with Hugging Face names, contiguous on the CPU, in `dtype`
// (lm_head.weight omitted when tied, as transformers does).
NamedTensorList model_state_tensors(CausalLM& model, std::optional<torch::Dtype> dtype = std::nullopt);

struct SaveOptions {
  // transformers' default max_shard_size is "5GB" (decimal); above it the weights are sharded.
  std::uint64_t max_shard_bytes = 5'000'000'000ULL;
  std::optional<torch::Dtype> dtype;   // default: the model's parameter dtype
  std::string generation_config_json;  // "" = bos/eos from the config
  const Tokenizer* tokenizer = nullptr;  // when set, tokenizer.json + tokenizer_config.json
  // tokenizer_config.json's chat_template (TokenizerFilesOptions::chat_templates).
  std::optional<std::vector<NamedChatTemplate>> chat_templates;
  // Further files (name, text) written into the folder with the others, in the same atomic
  // replace (grpo-export's record of what it merged).
  std::vector<std::pair<std::string, std::string>> extra_files;
};

// Writes the folder atomically: every file goes through the atomic writer (fsynced) into a
// sibling staging folder that then replaces DIR (replace_directory, core/util/fs.h: the folder
// and its parent fsynced), so a crash or a power cut never leaves a half-written checkpoint
// under DIR's name. Any failure (a full disk, ...) is a CheckpointError naming DIR and the
// cause; the staging folder is removed and DIR is untouched.
void save_model(const std::string& dir, CausalLM& model, const SaveOptions& options = {});

// Writes a LibTorch archive (optimizer.pt, rng.pt) through the atomic writer
// (atomic_write_file_with): a failed write, a full disk included, is a std::runtime_error
// naming the path, and leaves no file behind.
void save_archive(torch::serialize::OutputArchive& archive, const std::string& path);

// "float32", "bfloat16", "float16" <-> torch dtypes (config.json's torch_dtype).
torch::Dtype dtype_from_name(const std::string& name, const std::string& context);
std::string dtype_to_name(torch::Dtype dtype);

}  // namespace grpo::core
