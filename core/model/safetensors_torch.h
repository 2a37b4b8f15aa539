// safetensors <-> torch::Tensor, and Hugging Face sharded checkpoints
// (model.safetensors, or model-0000k-of-0000n.safetensors + model.safetensors.index.json).
// The format itself (parsing, validation, mapping, raw writing) is in safetensors.h.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/model/safetensors.h"

namespace grpo::core {

using NamedTensorList = std::vector<std::pair<std::string, torch::Tensor>>;

// File names used by Hugging Face.
inline constexpr const char* kSafetensorsSingleFile = "model.safetensors";
inline constexpr const char* kSafetensorsIndexFile = "model.safetensors.index.json";

// torch dtype <-> safetensors dtype: kDouble F64, kFloat F32, kHalf F16, kBFloat16 BF16,
// kLong I64, kInt I32, kShort I16, kChar I8, kByte U8, kBool BOOL. nullopt otherwise
// (F8_E4M3 / F8_E5M2 have no LibTorch 1.13 dtype).
std::optional<StDType> to_st_dtype(c10::ScalarType type);
std::optional<c10::ScalarType> to_torch_dtype(StDType dtype);

// One tensor of a mapped file as a CPU tensor that owns its memory (copied out of the
// mapping, so it is aligned, writable and independent of the file). Throws SafetensorsError
// naming the file and tensor for a dtype LibTorch cannot represent or a value that is not
// finite (check_finite_values): every load of weights comes through here.
torch::Tensor tensor_from_mapping(const MappedSafetensors& file, const TensorInfo& info);

// Every tensor of a file, in data order (the order the tensors are stored in the file; for
// files we wrote: dtype alignment descending, then name). Tensors own their memory (copied;
// the file is unmapped when this returns). `metadata`, when given, receives __metadata__.
// Throws SafetensorsError.
NamedTensorList load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

// Writes the tensors (as contiguous CPU copies; any device, any strides) atomically. Names
// must be unique and non-empty. An unsupported dtype throws SafetensorsError naming the tensor
// before anything is written, so an existing file at `path` is left untouched.
void save_safetensors(const std::string& path, const NamedTensorList& tensors,
                      const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// The tensors of a checkpoint folder: through model.safetensors.index.json when present
// (validated: "weight_map" is an object of tensor name -> shard file name in `dir`; every
// shard exists and holds exactly the tensors mapped to it, so no tensor is in two shards and
// none is missing), else model.safetensors. Order: shards by file name, then data order.
// Throws SafetensorsError naming `dir` when neither file exists.
NamedTensorList load_checkpoint_tensors(const std::string& dir);

// The tensors of a checkpoint folder as load_checkpoint_tensors finds them (the same index
// checks and errors, the same order), each passed to `visit` with its mapped file, unread.
using CheckpointTensorVisitor = std::function<void(const MappedSafetensors& file, const TensorInfo& info)>;
void for_each_checkpoint_tensor(const std::string& dir, const CheckpointTensorVisitor& visit);

// check_finite_values over every tensor of a checkpoint folder without loading it (a raw scan
// of the mapped files): `grpo-run --validate` finds a NaN model before any weights load.
void check_checkpoint_finite(const std::string& dir);

// Saves a checkpoint into `dir` (created if needed): one model.safetensors when the tensors'
// total size is <= max_shard_bytes, else shards model-0000k-of-0000n.safetensors (tensors in
// list order, a new shard when the next tensor would push the current one past
// max_shard_bytes; a tensor larger than that gets a shard of its own) plus
// model.safetensors.index.json ({"metadata": {"total_size": sum of tensor bytes},
// "weight_map": {...}}, as Hugging Face writes it). Every file is written atomically; files of
// an earlier save in `dir` that the new one does not use (model.safetensors, the index,
// model-*-of-*.safetensors shards) are removed afterwards. `metadata` goes into every file.
void save_checkpoint_tensors(const std::string& dir, const NamedTensorList& tensors, std::uint64_t max_shard_bytes,
                             const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace grpo::core
