#include "core/model/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_files.h"
#include "core/util/fs.h"
#include "core/util/strings.h"

namespace grpo::core {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string first_names(const std::vector<std::string>& names) {
  const std::size_t shown = std::min<std::size_t>(names.size(), 5);
  std::vector<std::string> head(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(shown));
  std::string s = join(head, ", ");
  if (names.size() > shown) s += ", ... (" + std::to_string(names.size()) + " in all)";
  return s;
}

std::string generation_config_from(const ModelConfig& c) {
  json j = json::object();
  j["_from_model_config"] = true;
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  return j.dump(2) + "\n";
}

}  // namespace

torch::Dtype dtype_from_name(const std::string& name, const std::string& context) {
  if (name == "float32" || name == "fp32") return torch::kFloat32;
  if (name == "bfloat16" || name == "bf16") return torch::kBFloat16;
  if (name == "float16" || name == "fp16") return torch::kFloat16;
  throw CheckpointError(context + ": unsupported dtype '" + name + "' (expected float32, bfloat16 or float16)" +
                        did_you_mean(name, {"float32", "bfloat16", "float16"}));
}

std::string dtype_to_name(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat32: return "float32";
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat16: return "float16";
    default: throw CheckpointError(std::string("model dtype ") + c10::toString(dtype) + " cannot be saved");
  }
}

void load_model_weights(CausalLM& model, const NamedTensorList& tensors, const std::string& source) {
  torch::NoGradGuard no_grad;
  auto params = model->named_parameters(/*recurse=*/true);
  // Every check before the first copy: a file that does not fit leaves the model as it was
  // (a resume then falls back to an older checkpoint, core/train/train_state.h).
  std::set<std::string> seen;
  std::vector<std::string> unexpected;
  std::vector<std::pair<torch::Tensor*, const torch::Tensor*>> copies;
  for (const auto& [name, tensor] : tensors) {
    torch::Tensor* param = params.find(name);
    if (!param) {
      const bool tied_head = name == "lm_head.weight" && model->config().tie_word_embeddings;
      const bool rotary_buffer = ends_with(name, "rotary_emb.inv_freq");
      if (!tied_head && !rotary_buffer) unexpected.push_back(name);
      continue;
    }
    if (param->sizes() != tensor.sizes())
      throw CheckpointError(source + ": tensor '" + name + "' has shape " + shape_text(tensor.sizes().vec()) +
                            " but config.json implies " + shape_text(param->sizes().vec()));
    if (!seen.insert(name).second) throw CheckpointError(source + ": tensor '" + name + "' appears twice");
    copies.emplace_back(param, &tensor);
  }
  if (!unexpected.empty())
    throw CheckpointError(source + ": tensors that are not parameters of " +
                          architecture_name(model->config().architecture) + " with this config.json: " +
                          first_names(unexpected));
  std::vector<std::string> missing;
  for (const auto& item : params)
    if (!seen.count(item.key())) missing.push_back(item.key());
  if (!missing.empty()) throw CheckpointError(source + ": missing tensors: " + first_names(missing));
  for (const auto& [param, tensor] : copies) param->copy_(tensor->to(param->scalar_type()));
}

LoadedModel load_model(const std::string& dir, torch::Dtype dtype, torch::Device device) {
  if (!fs::is_directory(dir)) throw CheckpointError(dir + ": not a model folder (expected config.json and model.safetensors)");
  LoadedModel loaded;
  const std::string config_path = (fs::path(dir) / "config.json").string();
  if (!fs::exists(config_path)) throw CheckpointError(dir + ": no config.json");
  loaded.config = load_model_config(config_path);
  loaded.model = CausalLM(loaded.config);
  loaded.model->to(dtype);
  load_model_weights(loaded.model, load_checkpoint_tensors(dir), dir);
  loaded.model->to(device);
  const fs::path gen = fs::path(dir) / "generation_config.json";
  if (fs::exists(gen)) loaded.generation_config_json = read_file(gen.string());
  return loaded;
}

NamedTensorList model_state_tensors(CausalLM& model, std::optional<torch::Dtype> dtype) {
  NamedTensorList out;
  for (const auto& item : model->named_parameters(/*recurse=*/true)) {
    auto t = item.value().detach().to(torch::kCPU);
    if (dtype) t = t.to(*dtype);
    out.emplace_back(item.key(), t.contiguous());
  }
  return out;
}

void save_model(const std::string& dir, CausalLM& model, const SaveOptions& options) {
  const fs::path target = fs::absolute(dir).lexically_normal();
  if (target.filename().empty()) throw CheckpointError(dir + ": expected a folder path");
  const fs::path parent = target.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw CheckpointError(dir + ": cannot create the parent folder: " + ec.message());
  // A staging folder of its own (unique even for concurrent saves to the same DIR).
  std::string staging_name = (parent / (target.filename().string() + ".tmp-XXXXXX")).string();
  if (::mkdtemp(staging_name.data()) == nullptr)
    throw CheckpointError(dir + ": cannot create a staging folder: " + std::strerror(errno));
  const fs::path staging = staging_name;
  try {
    const torch::Dtype dtype = options.dtype ? *options.dtype : model->lm_head_weight().scalar_type();
    const std::string dtype_name = dtype_to_name(dtype);
    atomic_write_file((staging / "config.json").string(), model_config_to_json(model->config(), dtype_name));
    atomic_write_file((staging / "generation_config.json").string(),
                      options.generation_config_json.empty() ? generation_config_from(model->config())
                                                             : options.generation_config_json);
    save_checkpoint_tensors(staging.string(), model_state_tensors(model, dtype), options.max_shard_bytes);
    if (options.tokenizer) {
      TokenizerFilesOptions tok;
      tok.chat_templates = options.chat_templates;
      write_tokenizer_files(staging.string(), *options.tokenizer, tok);
    }
    for (const auto& [name, text] : options.extra_files) atomic_write_file((staging / name).string(), text);
    ::chmod(staging.c_str(), 0755);  // mkdtemp creates 0700; checkpoints are ordinary folders
    // Into place in one step, so DIR always names a complete checkpoint.
    replace_directory(staging.string(), target.string());
  } catch (const CheckpointError&) {
    fs::remove_all(staging, ec);
    throw;
  } catch (const std::exception& e) {
    fs::remove_all(staging, ec);
    throw CheckpointError(dir + ": cannot save the model: " + e.what());
  }
}

void save_archive(torch::serialize::OutputArchive& archive, const std::string& path) {
  // Streamed through the atomic writer. LibTorch's writer throws when a write comes up short
  // and then throws again from its destructor (std::terminate), so it is always told the
  // bytes went out; the first error is kept, later writes are skipped, and the error is
  // raised once LibTorch is done with the stream.
  atomic_write_file_with(path, [&](std::FILE* file) {
    int error = 0;
    archive.save_to([&](const void* data, std::size_t n) -> std::size_t {
      if (error == 0 && n > 0 && std::fwrite(data, 1, n, file) != n) error = errno ? errno : EIO;
      return n;
    });
    if (error != 0) throw std::runtime_error("cannot write '" + path + "': " + std::strerror(error));
  });
}

}  // namespace grpo::core
