#include "core/model/safetensors_torch.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/util/fs.h"
#include "core/util/json_limits.h"

namespace grpo::core {

namespace fs = std::filesystem;

namespace {

using json = nlohmann::json;

std::string quoted(const std::string& s) { return "'" + s + "'"; }

[[noreturn]] void fail_index(const std::string& index_path, const std::string& what) {
  throw SafetensorsError("checkpoint index " + quoted(index_path) + ": " + what);
}

// Contiguous CPU copies ready for write_safetensors; `keep` owns the memory the RawTensors
// point into. Every dtype is checked before any copy is made.
std::vector<RawTensor> to_raw(const std::string& path, const NamedTensorList& tensors, std::vector<torch::Tensor>& keep) {
  std::vector<StDType> dtypes;
  dtypes.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) throw SafetensorsError("safetensors file " + quoted(path) + ": tensor " + quoted(name) + " is undefined");
    auto st = to_st_dtype(t.scalar_type());
    if (!st)
      throw SafetensorsError("safetensors file " + quoted(path) + ": tensor " + quoted(name) + " has dtype " +
                             std::string(c10::toString(t.scalar_type())) + ", which safetensors cannot store");
    dtypes.push_back(*st);
  }
  std::vector<RawTensor> raw;
  raw.reserve(tensors.size());
  keep.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    torch::Tensor c = tensors[i].second.detach().to(torch::kCPU).contiguous();
    keep.push_back(c);
    RawTensor r;
    r.name = tensors[i].first;
    r.dtype = dtypes[i];
    r.shape.assign(c.sizes().begin(), c.sizes().end());
    r.nbytes = static_cast<std::size_t>(c.numel()) * c.element_size();
    r.data = r.nbytes ? c.data_ptr() : nullptr;
    raw.push_back(std::move(r));
  }
  return raw;
}

std::uint64_t tensor_bytes(const torch::Tensor& t) {
  return static_cast<std::uint64_t>(t.numel()) * static_cast<std::uint64_t>(t.element_size());
}

bool is_shard_name(const std::string& name) {
  static const std::regex pattern(R"(model-\d{5}-of-\d{5}\.safetensors)");
  return std::regex_match(name, pattern);
}

std::string shard_name(std::size_t k, std::size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k, n);
  return buf;
}

void remove_file(const fs::path& p) {
  std::error_code ec;
  fs::remove(p, ec);
  if (ec) throw SafetensorsError("cannot remove stale checkpoint file " + quoted(p.string()) + ": " + ec.message());
}

}  // namespace

std::optional<StDType> to_st_dtype(c10::ScalarType type) {
  switch (type) {
    case torch::kDouble: return StDType::F64;
    case torch::kFloat: return StDType::F32;
    case torch::kHalf: return StDType::F16;
    case torch::kBFloat16: return StDType::BF16;
    case torch::kLong: return StDType::I64;
    case torch::kInt: return StDType::I32;
    case torch::kShort: return StDType::I16;
    case torch::kChar: return StDType::I8;
    case torch::kByte: return StDType::U8;
    case torch::kBool: return StDType::BOOL;
    default: return std::nullopt;
  }
}

std::optional<c10::ScalarType> to_torch_dtype(StDType dtype) {
  switch (dtype) {
    case StDType::F64: return torch::kDouble;
    case StDType::F32: return torch::kFloat;
    case StDType::F16: return torch::kHalf;
    case StDType::BF16: return torch::kBFloat16;
    case StDType::I64: return torch::kLong;
    case StDType::I32: return torch::kInt;
    case StDType::I16: return torch::kShort;
    case StDType::I8: return torch::kChar;
    case StDType::U8: return torch::kByte;
    case StDType::BOOL: return torch::kBool;
    case StDType::F8_E4M3:
    case StDType::F8_E5M2: return std::nullopt;
  }
  return std::nullopt;
}

torch::Tensor tensor_from_mapping(const MappedSafetensors& file, const TensorInfo& info) {
  auto type = to_torch_dtype(info.dtype);
  if (!type)
    throw SafetensorsError("safetensors file " + quoted(file.path()) + ": tensor " + quoted(info.name) + " has dtype " +
                           dtype_name(info.dtype) + ", which LibTorch " + TORCH_VERSION + " cannot represent");
  torch::Tensor t = torch::empty(info.shape, torch::TensorOptions().dtype(*type).device(torch::kCPU));
  // Every loader (models, adapters, checkpoints, resume) comes through here, so the values are
  // checked here, each slice right after its copy while it is still in cache: a second pass
  // over the file would cost as much as the copy.
  constexpr uint64_t kSlice = 256 * 1024;  // a multiple of every element size
  auto* to = static_cast<uint8_t*>(t.data_ptr());
  const uint8_t* from = file.data(info);
  for (uint64_t at = 0; at < info.nbytes(); at += kSlice) {
    const uint64_t n = std::min(kSlice, info.nbytes() - at);
    std::memcpy(to + at, from + at, n);
    if (has_non_finite(info.dtype, to + at, n)) check_finite_values(file.path(), info, from);  // throws, naming the first
  }
  return t;
}

NamedTensorList load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  auto file = MappedSafetensors::open(path);
  NamedTensorList out;
  out.reserve(file->header().tensors.size());
  for (const auto& info : file->header().tensors) out.emplace_back(info.name, tensor_from_mapping(*file, info));
  if (metadata) *metadata = file->header().metadata;
  return out;
}

void save_safetensors(const std::string& path, const NamedTensorList& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<torch::Tensor> keep;
  std::vector<RawTensor> raw = to_raw(path, tensors, keep);
  write_safetensors(path, raw, metadata);
}

NamedTensorList load_checkpoint_tensors(const std::string& dir) {
  NamedTensorList out;
  for_each_checkpoint_tensor(dir, [&](const MappedSafetensors& file, const TensorInfo& info) {
    out.emplace_back(info.name, tensor_from_mapping(file, info));
  });
  return out;
}

void check_checkpoint_finite(const std::string& dir) {
  for_each_checkpoint_tensor(dir, [](const MappedSafetensors& file, const TensorInfo& info) {
    check_finite_values(file.path(), info, file.data(info));
  });
}

void for_each_checkpoint_tensor(const std::string& dir, const CheckpointTensorVisitor& visit) {
  const fs::path root(dir);
  const fs::path index_path = root / kSafetensorsIndexFile;
  const fs::path single_path = root / kSafetensorsSingleFile;
  std::error_code ec;
  if (!fs::exists(index_path, ec)) {
    if (fs::exists(single_path, ec)) {
      const auto file = MappedSafetensors::open(single_path.string());
      for (const auto& info : file->header().tensors) visit(*file, info);
      return;
    }
    throw SafetensorsError("checkpoint folder " + quoted(dir) + " has neither " + kSafetensorsIndexFile + " nor " +
                           kSafetensorsSingleFile);
  }

  const std::string ipath = index_path.string();
  json index;
  try {
    std::string text = read_file(ipath);
    if (auto deep = json_nesting_error(text)) fail_index(ipath, *deep);
    index = json::parse(text);
  } catch (const json::exception& e) {
    fail_index(ipath, std::string("not valid JSON: ") + e.what());
  } catch (const std::exception& e) {
    fail_index(ipath, e.what());
  }
  if (!index.is_object()) fail_index(ipath, "not a JSON object");
  auto wm = index.find("weight_map");
  if (wm == index.end()) fail_index(ipath, "missing \"weight_map\"");
  if (!wm->is_object()) fail_index(ipath, "\"weight_map\" is not a JSON object");

  // shard file -> the tensors the index maps to it
  std::map<std::string, std::set<std::string>> shards;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string()) fail_index(ipath, "\"weight_map\" entry for tensor " + quoted(it.key()) + " is not a string");
    const std::string& shard = it->get_ref<const std::string&>();
    if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos)
      fail_index(ipath, "tensor " + quoted(it.key()) + " is mapped to " + quoted(shard) + ", which is not a file name");
    shards[shard].insert(it.key());
  }

  for (const auto& [shard, expected] : shards) {
    const fs::path shard_path = root / shard;
    if (!fs::exists(shard_path, ec))
      fail_index(ipath, "shard " + quoted(shard) + " (tensor " + quoted(*expected.begin()) + ") does not exist");
    auto file = MappedSafetensors::open(shard_path.string());
    for (const auto& info : file->header().tensors) {
      auto mapped = wm->find(info.name);
      if (mapped == wm->end())
        fail_index(ipath, "shard " + quoted(shard) + " holds tensor " + quoted(info.name) + ", which the index does not list");
      if (mapped->get_ref<const std::string&>() != shard)
        fail_index(ipath, "tensor " + quoted(info.name) + " is in shard " + quoted(shard) + " but the index maps it to " +
                              quoted(mapped->get<std::string>()));
      visit(*file, info);
    }
    for (const auto& name : expected)
      if (file->find(name) == nullptr)
        fail_index(ipath, "tensor " + quoted(name) + " is mapped to shard " + quoted(shard) + ", which does not hold it");
  }
}

void save_checkpoint_tensors(const std::string& dir, const NamedTensorList& tensors, std::uint64_t max_shard_bytes,
                             const std::map<std::string, std::string>& metadata) {
  const fs::path root(dir);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw SafetensorsError("cannot create checkpoint folder " + quoted(dir) + ": " + ec.message());

  // Validate every dtype (and name) up front so that a bad list writes nothing.
  {
    std::set<std::string> names;
    for (const auto& [name, t] : tensors) {
      if (!names.insert(name).second)
        throw SafetensorsError("checkpoint folder " + quoted(dir) + ": duplicate tensor name " + quoted(name));
      if (!t.defined() || !to_st_dtype(t.scalar_type()))
        throw SafetensorsError("checkpoint folder " + quoted(dir) + ": tensor " + quoted(name) +
                               (t.defined() ? " has dtype " + std::string(c10::toString(t.scalar_type())) +
                                                  ", which safetensors cannot store"
                                            : std::string(" is undefined")));
    }
  }

  std::uint64_t total = 0;
  for (const auto& [name, t] : tensors) total += tensor_bytes(t);

  std::set<std::string> keep_files;
  if (total <= max_shard_bytes) {
    save_safetensors((root / kSafetensorsSingleFile).string(), tensors, metadata);
    keep_files.insert(kSafetensorsSingleFile);
  } else {
    // Greedy split in list order (as huggingface_hub's split_state_dict_into_shards does).
    std::vector<NamedTensorList> groups;
    std::uint64_t current = 0;
    for (const auto& entry : tensors) {
      std::uint64_t b = tensor_bytes(entry.second);
      if (groups.empty() || (current + b > max_shard_bytes && !groups.back().empty())) {
        groups.emplace_back();
        current = 0;
      }
      groups.back().push_back(entry);
      current += b;
    }
    json weight_map = json::object();
    for (std::size_t k = 0; k < groups.size(); ++k) {
      const std::string name = shard_name(k + 1, groups.size());
      save_safetensors((root / name).string(), groups[k], metadata);
      keep_files.insert(name);
      for (const auto& entry : groups[k]) weight_map[entry.first] = name;
    }
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    const std::string ipath = (root / kSafetensorsIndexFile).string();
    try {
      atomic_write_file(ipath, index.dump(2, ' ', true) + "\n");
    } catch (const std::exception& e) {
      throw SafetensorsError(std::string("cannot write checkpoint index: ") + e.what());
    }
    keep_files.insert(kSafetensorsIndexFile);
  }

  // Remove what an earlier save left and this one does not use. The index goes first when
  // this save is a single file (load prefers the index), so a crash in between still leaves
  // a consistent checkpoint.
  if (!keep_files.count(kSafetensorsIndexFile)) remove_file(root / kSafetensorsIndexFile);
  if (!keep_files.count(kSafetensorsSingleFile)) remove_file(root / kSafetensorsSingleFile);
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (is_shard_name(name) && !keep_files.count(name)) remove_file(entry.path());
  }
  if (ec) throw SafetensorsError("cannot list checkpoint folder " + quoted(dir) + ": " + ec.message());
}

}  // namespace grpo::core
