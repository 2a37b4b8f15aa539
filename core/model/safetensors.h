// The safetensors format (Hugging Face), read and written by the project itself, torch-free:
// header parsing and validation, a memory-mapped reader and a raw atomic writer. The
// torch side (torch::Tensor in and out, sharded checkpoints) is in safetensors_torch.h.
//
// Layout of a file: 8 bytes little-endian u64 N, then N bytes of UTF-8 JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// then the data section; offsets are relative to its first byte (file offset 8 + N) and the
// data is little-endian, C order. docs/safetensors.md lists what the reader validates.
//
// Everything here depends only on the standard library, POSIX and (in the .cpp)
// nlohmann_json and core/util/fs.h, so that the fuzz target can compile it alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::core {

// Every error about a safetensors file or checkpoint: bad header, bad index, I/O. The
// message names the file (and the tensor where there is one).
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Element types. F8_E4M3 / F8_E5M2 are accepted when reading (as raw bytes); the torch
// side has no matching LibTorch 1.13 dtype and rejects them with an error naming the tensor.
enum class StDType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2 };

// Bytes per element (1, 2, 4 or 8).
std::size_t dtype_size(StDType dtype);
// The name used in the header: "F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8",
// "U8", "BOOL", "F8_E4M3", "F8_E5M2".
const char* dtype_name(StDType dtype);
// The inverse of dtype_name (exact, case-sensitive); nullopt for anything else.
std::optional<StDType> parse_dtype(std::string_view name);

struct TensorInfo {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;  // every entry >= 0; empty for a 0-d tensor
  uint64_t begin = 0;          // [begin, end) in the data section
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
  // Product of the shape (1 for 0-d). Validated not to overflow.
  uint64_t numel() const;
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // ordered by data offset (ties: by name)
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + N: file offset of the data section
  uint64_t data_size = 0;    // bytes in the data section (= end of the last tensor)
};

// Largest header accepted (the Rust crate's MAX_HEADER_SIZE).
inline constexpr uint64_t kSafetensorsMaxHeaderSize = 100'000'000;

// Parses and validates the header of a whole file held in memory (`file`, `file_size`
// bytes). `source` names the file in error messages. Throws SafetensorsError; never reads
// outside [file, file + file_size).
SafetensorsHeader parse_safetensors(const uint8_t* file, std::size_t file_size, const std::string& source);

// A safetensors file mapped into memory (read-only, private); the header is validated on
// open. The mapping lives as long as the object (munmap in the destructor): share it with
// shared_ptr when views into it must outlive the opener.
class MappedSafetensors {
 public:
  // Throws SafetensorsError naming `path` when it cannot be opened or mapped or is invalid.
  static std::shared_ptr<MappedSafetensors> open(const std::string& path);
  ~MappedSafetensors();
  MappedSafetensors(const MappedSafetensors&) = delete;
  MappedSafetensors& operator=(const MappedSafetensors&) = delete;

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  // nullptr when there is no tensor of that name.
  const TensorInfo* find(std::string_view name) const;
  // First byte of the tensor's data (info.nbytes() bytes); `info` must come from header().
  // Not necessarily aligned for the element type (files by other writers may not be).
  const uint8_t* data(const TensorInfo& info) const;
  std::size_t file_size() const { return size_; }

 private:
  MappedSafetensors() = default;
  std::string path_;
  void* base_ = nullptr;
  std::size_t size_ = 0;
  SafetensorsHeader header_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

// Weights are finite numbers: a NaN or an infinity in F64, F32, F16 or BF16 data is a damaged
// file or the save of a diverged run, never a usable weight (a NaN adapter passes every shape
// check and turns the whole model into NaN). Throws SafetensorsError naming `source`, the tensor,
// how many of its values are not finite and the first one; other dtypes pass. `data` holds the
// tensor's info.nbytes() bytes, at any alignment. A raw scan of the bytes: memory-bound.
void check_finite_values(const std::string& source, const TensorInfo& info, const uint8_t* data);
// Its fast test alone, over `nbytes` bytes of `dtype` data (a whole number of values): for data
// checked a slice at a time, then reported by check_finite_values.
bool has_non_finite(StDType dtype, const uint8_t* data, uint64_t nbytes);

// One tensor to write: `nbytes` bytes at `data`, which must equal numel(shape) *
// dtype_size(dtype) (checked).
struct RawTensor {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  std::size_t nbytes = 0;
};

// Serializes the header the way the reference implementation does: data sorted by dtype
// alignment descending then name, compact JSON with "__metadata__" first (omitted when
// empty), padded with spaces to a multiple of 8 bytes. Returns the 8-byte length prefix +
// padded header; `data_order` receives the indices into `tensors` in data order. Throws
// SafetensorsError (naming `path` and the tensor) for empty or duplicate names, names equal
// to "__metadata__", negative dims, or nbytes that do not match the shape.
std::string safetensors_header_bytes(const std::string& path, const std::vector<RawTensor>& tensors,
                                     const std::map<std::string, std::string>& metadata,
                                     std::vector<std::size_t>* data_order = nullptr);

// Writes a safetensors file atomically (temp file in the same folder + fsync + rename;
// creates parent directories). Everything is validated before the temp file is created; on
// any error the previous file at `path` is untouched. Throws SafetensorsError.
void write_safetensors(const std::string& path, const std::vector<RawTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace grpo::core
