#include "core/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "core/util/fs.h"
#include "core/util/json_limits.h"
#include "core/util/strings.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader assumes a little-endian host"
#endif

namespace grpo::core {

namespace {

using json = nlohmann::json;

struct DTypeRow {
  StDType dtype;
  const char* name;
  std::size_t size;
  int alignment_rank;  // the Rust crate's Dtype order (increasing alignment); writer sorts by it
};

constexpr DTypeRow kDTypes[] = {
    {StDType::BOOL, "BOOL", 1, 0},     {StDType::U8, "U8", 1, 1},   {StDType::I8, "I8", 1, 2},
    {StDType::F8_E5M2, "F8_E5M2", 1, 3}, {StDType::F8_E4M3, "F8_E4M3", 1, 4},
    {StDType::I16, "I16", 2, 5},       {StDType::F16, "F16", 2, 6}, {StDType::BF16, "BF16", 2, 7},
    {StDType::I32, "I32", 4, 8},       {StDType::F32, "F32", 4, 9}, {StDType::F64, "F64", 8, 10},
    {StDType::I64, "I64", 8, 11},
};

const DTypeRow& row_of(StDType dtype) {
  for (const auto& row : kDTypes)
    if (row.dtype == dtype) return row;
  throw SafetensorsError("invalid StDType value " + std::to_string(static_cast<int>(dtype)));
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

[[noreturn]] void fail_file(const std::string& source, const std::string& what) {
  throw SafetensorsError("safetensors file " + quoted(source) + ": " + what);
}
[[noreturn]] void fail_tensor(const std::string& source, const std::string& tensor, const std::string& what) {
  throw SafetensorsError("safetensors file " + quoted(source) + ": tensor " + quoted(tensor) + ": " + what);
}

// a * b, or nullopt on overflow.
std::optional<uint64_t> mul_checked(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// numel * dtype size, or nullopt on overflow. Dims are >= 0.
std::optional<uint64_t> bytes_for(const std::vector<int64_t>& shape, StDType dtype) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    auto m = mul_checked(n, static_cast<uint64_t>(d));
    if (!m) return std::nullopt;
    n = *m;
  }
  return mul_checked(n, dtype_size(dtype));
}

// A non-negative integer JSON value that fits int64 (shape entries, offsets). `what` names
// the field in errors.
uint64_t as_size(const json& v, const std::string& source, const std::string& tensor, const std::string& what) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail_tensor(source, tensor, what + " " + std::to_string(u) + " is too large");
    return u;
  }
  if (v.is_number_integer()) fail_tensor(source, tensor, what + " is negative (" + v.dump() + ")");
  fail_tensor(source, tensor, what + " is not a non-negative integer (" + v.dump() + ")");
}

TensorInfo parse_tensor(const std::string& source, const std::string& name, const json& v, uint64_t data_size) {
  if (!v.is_object()) fail_tensor(source, name, "entry is not a JSON object");
  TensorInfo info;
  info.name = name;

  auto dt = v.find("dtype");
  if (dt == v.end()) fail_tensor(source, name, "missing \"dtype\"");
  if (!dt->is_string()) fail_tensor(source, name, "\"dtype\" is not a string");
  auto parsed = parse_dtype(dt->get_ref<const std::string&>());
  if (!parsed) fail_tensor(source, name, "unknown dtype " + dt->dump());
  info.dtype = *parsed;

  auto sh = v.find("shape");
  if (sh == v.end()) fail_tensor(source, name, "missing \"shape\"");
  if (!sh->is_array()) fail_tensor(source, name, "\"shape\" is not an array");
  info.shape.reserve(sh->size());
  for (const auto& d : *sh) info.shape.push_back(static_cast<int64_t>(as_size(d, source, name, "shape entry")));

  auto off = v.find("data_offsets");
  if (off == v.end()) fail_tensor(source, name, "missing \"data_offsets\"");
  if (!off->is_array() || off->size() != 2) fail_tensor(source, name, "\"data_offsets\" is not an array [begin, end]");
  info.begin = as_size((*off)[0], source, name, "data_offsets begin");
  info.end = as_size((*off)[1], source, name, "data_offsets end");
  if (info.begin > info.end)
    fail_tensor(source, name, "data_offsets begin " + std::to_string(info.begin) + " > end " + std::to_string(info.end));
  if (info.end > data_size)
    fail_tensor(source, name,
                "data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
                    "] run past the end of the data section (" + std::to_string(data_size) + " bytes)");

  auto need = bytes_for(info.shape, info.dtype);
  if (!need) fail_tensor(source, name, "shape " + shape_text(info.shape) + " overflows the element count");
  if (*need != info.nbytes())
    fail_tensor(source, name,
                "data_offsets span " + std::to_string(info.nbytes()) + " bytes but shape " + shape_text(info.shape) +
                    " of " + dtype_name(info.dtype) + " needs " + std::to_string(*need));
  return info;
}

// The element at flat index `flat` of a C-order tensor of `shape`, as "[i, j, ...]".
std::string index_text(uint64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = static_cast<int64_t>(flat % static_cast<uint64_t>(shape[d]));
    flat /= static_cast<uint64_t>(shape[d]);
  }
  return shape_text(index);
}

// IEEE binary formats: a value is NaN or infinite exactly when its exponent bits are all set
// (NaN when the mantissa is not 0).
template <typename Bits>
Bits bits_at(const uint8_t* data, uint64_t i) {
  Bits b;
  std::memcpy(&b, data + i * sizeof(Bits), sizeof(Bits));  // files by other writers may be unaligned
  return b;
}

// Branch-free, so that the loop vectorizes: the scan runs at memory speed.
template <typename Bits>
uint64_t count_non_finite(const uint8_t* data, uint64_t n, Bits exponent) {
  uint64_t count = 0;
  for (uint64_t i = 0; i < n; ++i) count += static_cast<uint64_t>((bits_at<Bits>(data, i) & exponent) == exponent);
  return count;
}

// The masks of a floating-point dtype (exponent 0 for the others: nothing to check).
template <typename Fn>
auto with_float_bits(StDType dtype, Fn&& fn) {
  switch (dtype) {
    case StDType::F64: return fn(uint64_t{0x7FF0000000000000ULL}, uint64_t{0x000FFFFFFFFFFFFFULL});
    case StDType::F32: return fn(uint32_t{0x7F800000U}, uint32_t{0x007FFFFFU});
    case StDType::F16: return fn(uint16_t{0x7C00}, uint16_t{0x03FF});
    case StDType::BF16: return fn(uint16_t{0x7F80}, uint16_t{0x007F});
    default: return fn(uint8_t{0}, uint8_t{0});  // integers and booleans; F8 cannot be loaded (safetensors_torch.h)
  }
}

template <typename Bits>
void check_finite_bits(const std::string& source, const TensorInfo& info, const uint8_t* data, Bits exponent,
                       Bits mantissa) {
  const uint64_t n = info.numel();
  const uint64_t count = count_non_finite<Bits>(data, n, exponent);
  if (count == 0) return;
  uint64_t first = 0;
  while ((bits_at<Bits>(data, first) & exponent) != exponent) ++first;
  const Bits b = bits_at<Bits>(data, first);
  const char* value = (b & mantissa) != 0 ? "NaN" : (b >> (8 * sizeof(Bits) - 1)) != 0 ? "-inf" : "inf";
  fail_tensor(source, info.name,
              std::to_string(count) + " of its " + std::to_string(n) + " values are not finite (the first, at " +
                  index_text(first, info.shape) + ", is " + value +
                  "); weights must be finite numbers: the file is damaged or was saved from a diverged run");
}

}  // namespace

void check_finite_values(const std::string& source, const TensorInfo& info, const uint8_t* data) {
  with_float_bits(info.dtype, [&](auto exponent, auto mantissa) {
    if (exponent != 0) check_finite_bits(source, info, data, exponent, mantissa);
  });
}

bool has_non_finite(StDType dtype, const uint8_t* data, uint64_t nbytes) {
  return with_float_bits(dtype, [&](auto exponent, auto) {
    using Bits = decltype(exponent);
    return exponent != 0 && count_non_finite<Bits>(data, nbytes / sizeof(Bits), exponent) > 0;
  });
}

std::size_t dtype_size(StDType dtype) { return row_of(dtype).size; }
const char* dtype_name(StDType dtype) { return row_of(dtype).name; }
std::optional<StDType> parse_dtype(std::string_view name) {
  for (const auto& row : kDTypes)
    if (name == row.name) return row.dtype;
  return std::nullopt;
}

uint64_t TensorInfo::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);  // validated by the parser
  return n;
}

// Validation rules. They follow the Rust `safetensors` crate (safetensors/src/tensor.rs,
// SafeTensors::read_metadata + Metadata::validate), which is what Hugging Face tools use:
//  - the file holds at least the 8-byte length N; N <= 100,000,000 (MAX_HEADER_SIZE);
//    8 + N <= file size;
//  - the header is UTF-8 JSON (trailing whitespace allowed: the reference writer pads with
//    spaces); the root is an object; "__metadata__" is an object (or null) of string values;
//  - every other key is a tensor with "dtype" (known name), "shape" (non-negative integers)
//    and "data_offsets" ([begin, end], non-negative integers, begin <= end); other keys in a
//    tensor entry are ignored, as serde does;
//  - end - begin == product(shape) * dtype size, computed with overflow checks;
//  - sorted by offsets, the tensors tile the data section exactly: the first begins at 0,
//    each begins where the previous one ends (no gap, no overlap), and the last one ends at
//    the end of the file. The crate rejects gaps (InvalidOffset) and trailing bytes after
//    the last tensor (MetadataIncompleteBuffer), so we do too.
//  Stricter than the crate: duplicate keys anywhere in the header are rejected (serde keeps
//  the last one silently), and offsets past the data section are reported per tensor.
SafetensorsHeader parse_safetensors(const uint8_t* file, std::size_t file_size, const std::string& source) {
  if (file_size < 8)
    fail_file(source, "file is " + std::to_string(file_size) + " bytes, too small for the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file[i];
  if (n > kSafetensorsMaxHeaderSize)
    fail_file(source, "header length " + std::to_string(n) + " exceeds the limit of " +
                          std::to_string(kSafetensorsMaxHeaderSize) + " bytes");
  if (n > file_size - 8)
    fail_file(source, "header length " + std::to_string(n) + " runs past the end of the file (" +
                          std::to_string(file_size) + " bytes)");

  SafetensorsHeader header;
  header.data_offset = 8 + n;
  header.data_size = file_size - header.data_offset;

  const char* text = reinterpret_cast<const char*>(file + 8);
  json root;
  {
    // Duplicate keys: nlohmann keeps the last silently; reject them, per object.
    std::vector<std::set<std::string>> keys;
    auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) -> bool {
      switch (event) {
        case json::parse_event_t::object_start: keys.emplace_back(); break;
        case json::parse_event_t::object_end:
          if (!keys.empty()) keys.pop_back();
          break;
        case json::parse_event_t::key:
          if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second) {
            if (keys.size() == 1) fail_file(source, "duplicate tensor name " + quoted(parsed.get<std::string>()));
            fail_file(source, "duplicate key " + quoted(parsed.get<std::string>()) + " in the header");
          }
          break;
        default: break;
      }
      return true;
    };
    if (auto deep = json_nesting_error(std::string_view(text, n))) fail_file(source, "header: " + *deep);
    try {
      root = json::parse(text, text + n, callback);
    } catch (const json::exception& e) {
      fail_file(source, std::string("header is not valid JSON: ") + e.what());
    }
  }
  if (!root.is_object()) fail_file(source, "header is not a JSON object");

  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& key = it.key();
    if (key == "__metadata__") {
      if (it->is_null()) continue;
      if (!it->is_object()) fail_file(source, "\"__metadata__\" is not a JSON object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail_file(source, "\"__metadata__\" value for " + quoted(m.key()) + " is not a string");
        header.metadata.emplace(m.key(), m->get<std::string>());
      }
      continue;
    }
    header.tensors.push_back(parse_tensor(source, key, *it, header.data_size));
  }

  std::sort(header.tensors.begin(), header.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t expected = 0;
  const TensorInfo* previous = nullptr;
  for (const auto& t : header.tensors) {
    if (t.begin < expected)
      fail_tensor(source, t.name,
                  "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "] overlap tensor " +
                      quoted(previous->name));
    if (t.begin > expected)
      fail_tensor(source, t.name,
                  "data_offsets begin " + std::to_string(t.begin) + " leaves a gap after " +
                      (previous ? "tensor " + quoted(previous->name) : std::string("the start of the data section")) +
                      " (which ends at " + std::to_string(expected) + ")");
    expected = t.end;
    previous = &t;
  }
  if (expected != header.data_size)
    fail_file(source, std::to_string(header.data_size - expected) + " trailing bytes after the last tensor (data section is " +
                          std::to_string(header.data_size) + " bytes, tensors cover " + std::to_string(expected) + ")");
  return header;
}

// ---- MappedSafetensors -------------------------------------------------------------------

std::shared_ptr<MappedSafetensors> MappedSafetensors::open(const std::string& path) {
  std::shared_ptr<MappedSafetensors> self(new MappedSafetensors());
  self->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_file(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail_file(path, std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail_file(path, "not a regular file");
  }
  self->size_ = static_cast<std::size_t>(st.st_size);
  if (self->size_ > 0) {
    void* p = ::mmap(nullptr, self->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail_file(path, std::string("cannot map: ") + std::strerror(err));
    }
    self->base_ = p;
  }
  ::close(fd);  // the mapping stays valid
  self->header_ = parse_safetensors(static_cast<const uint8_t*>(self->base_), self->size_, path);
  for (std::size_t i = 0; i < self->header_.tensors.size(); ++i) self->index_.emplace(self->header_.tensors[i].name, i);
  return self;
}

MappedSafetensors::~MappedSafetensors() {
  if (base_ != nullptr) ::munmap(base_, size_);
}

const TensorInfo* MappedSafetensors::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

const uint8_t* MappedSafetensors::data(const TensorInfo& info) const {
  return static_cast<const uint8_t*>(base_) + header_.data_offset + info.begin;
}

// ---- writer ---------------------------------------------------------------------------------

std::string safetensors_header_bytes(const std::string& path, const std::vector<RawTensor>& tensors,
                                     const std::map<std::string, std::string>& metadata,
                                     std::vector<std::size_t>* data_order) {
  auto json_string = [&](const std::string& s, const std::string& what) {
    try {
      return json(s).dump();
    } catch (const json::exception&) {
      fail_file(path, what + " is not valid UTF-8");
    }
  };

  std::set<std::string_view> names;
  for (const auto& t : tensors) {
    if (t.name.empty()) fail_file(path, "a tensor has an empty name");
    if (t.name == "__metadata__") fail_file(path, "a tensor cannot be named \"__metadata__\"");
    if (!names.insert(t.name).second) fail_tensor(path, t.name, "duplicate tensor name");
    row_of(t.dtype);
    for (int64_t d : t.shape)
      if (d < 0) fail_tensor(path, t.name, "negative dimension in shape " + shape_text(t.shape));
    auto need = bytes_for(t.shape, t.dtype);
    if (!need) fail_tensor(path, t.name, "shape " + shape_text(t.shape) + " overflows the element count");
    if (*need != t.nbytes)
      fail_tensor(path, t.name,
                  std::to_string(t.nbytes) + " bytes given but shape " + shape_text(t.shape) + " of " +
                      dtype_name(t.dtype) + " needs " + std::to_string(*need));
    if (t.nbytes > 0 && t.data == nullptr) fail_tensor(path, t.name, "no data");
  }

  // The reference order: alignment descending, then name. With every dtype size a power of
  // two, this keeps each tensor aligned to its element size without padding between them.
  std::vector<std::size_t> order(tensors.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    int ra = row_of(tensors[a].dtype).alignment_rank, rb = row_of(tensors[b].dtype).alignment_rank;
    if (ra != rb) return ra > rb;
    return tensors[a].name < tensors[b].name;
  });

  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      if (!first) h += ",";
      first = false;
      h += json_string(k, "metadata key") + ":" + json_string(v, "metadata value for " + quoted(k));
    }
    h += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (std::size_t i : order) {
    const RawTensor& t = tensors[i];
    if (!first) h += ",";
    first = false;
    h += json_string(t.name, "tensor name") + ":{\"dtype\":\"" + dtype_name(t.dtype) + "\",\"shape\":[";
    for (std::size_t d = 0; d < t.shape.size(); ++d) h += (d ? "," : "") + std::to_string(t.shape[d]);
    uint64_t end = 0;
    if (__builtin_add_overflow(offset, static_cast<uint64_t>(t.nbytes), &end)) fail_file(path, "total size overflows");
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');

  std::string out(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += h;
  if (data_order) *data_order = std::move(order);
  return out;
}

void write_safetensors(const std::string& path, const std::vector<RawTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<std::size_t> order;
  const std::string header = safetensors_header_bytes(path, tensors, metadata, &order);
  try {
    atomic_write_file_with(path, [&](std::FILE* f) {
      auto put = [&](const void* p, std::size_t size) {
        if (size > 0 && std::fwrite(p, 1, size, f) != size)
          fail_file(path, std::string("write failed: ") + std::strerror(errno));
      };
      put(header.data(), header.size());
      for (std::size_t i : order) put(tensors[i].data, tensors[i].nbytes);
    });
  } catch (const SafetensorsError&) {
    throw;
  } catch (const std::exception& e) {
    fail_file(path, std::string("cannot write: ") + e.what());
  }
}

}  // namespace grpo::core
