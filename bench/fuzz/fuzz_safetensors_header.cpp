// libFuzzer target: the input is a whole safetensors file. parse_safetensors must either
// accept it or throw SafetensorsError; any other exception, a crash or a sanitizer report
// is a bug. An accepted file must describe only bytes inside the input, and re-serializing
// it with our writer must give a file that parses to the same tensors.
//   build-fuzz/fuzz_safetensors_header -max_total_time=60 bench/fuzz/corpus/safetensors
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/model/safetensors.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace grpo::core;
  SafetensorsHeader header;
  try {
    header = parse_safetensors(data, size, "fuzz.safetensors");
  } catch (const SafetensorsError&) {
    return 0;
  }

  // Everything accepted lies inside the input; touch it so ASan checks the bounds.
  check(header.data_offset <= size && header.data_offset + header.data_size == size);
  unsigned sum = 0;
  bool writable = true;
  std::vector<RawTensor> raw;
  for (const auto& t : header.tensors) {
    check(t.begin <= t.end && t.end <= header.data_size);
    const uint8_t* p = data + header.data_offset + t.begin;
    for (uint64_t i = 0; i < t.nbytes(); ++i) sum += p[i];
    if (t.name.empty()) writable = false;  // readable, but our writer refuses empty names
    raw.push_back({t.name, t.dtype, t.shape, p, static_cast<std::size_t>(t.nbytes())});
  }
  volatile unsigned sink = sum;
  (void)sink;

  if (!writable) return 0;
  std::vector<std::size_t> order;
  std::string file = safetensors_header_bytes("fuzz-out.safetensors", raw, header.metadata, &order);
  for (std::size_t i : order) file.append(static_cast<const char*>(raw[i].data), raw[i].nbytes);
  SafetensorsHeader again = parse_safetensors(reinterpret_cast<const uint8_t*>(file.data()), file.size(), "fuzz-out");
  check(again.tensors.size() == header.tensors.size());
  check(again.metadata == header.metadata);
  check(again.data_size == header.data_size);
  return 0;
}
