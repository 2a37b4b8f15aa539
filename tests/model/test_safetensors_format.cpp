// The torch-free safetensors layer: the reader checked against hand-built files (the format
// spec, not our writer), every malformed-header rule, the writer checked by an independent
// parse and against the reference implementation's bytes, atomic writes.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/model/safetensors.h"
#include "core/util/fs.h"
#include "tests/support/error_of.h"
#include "tests/support/test_dir.h"

namespace {

namespace fs = std::filesystem;
using namespace grpo::core;
using grpo::testing::error_of;

std::string test_dir() { return grpo::testing::fresh_test_dir("format"); }

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A file from the spec: u64 LE header length, header, data.
std::string make_file(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

std::string f32_bytes(std::initializer_list<float> values) {
  std::string s;
  for (float v : values) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    for (int i = 0; i < 4; ++i) s += static_cast<char>((bits >> (8 * i)) & 0xff);
  }
  return s;
}

SafetensorsHeader parse(const std::string& bytes, const std::string& source = "bad.safetensors") {
  return parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), source);
}

// The error for a file built from `header` and `data`; must name the file.
std::string parse_error(const std::string& header, const std::string& data) {
  std::string msg = error_of<SafetensorsError>([&] { parse(make_file(header, data)); });
  EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << msg;
  return msg;
}

std::string write_bytes(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::string path = (fs::path(dir) / name).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

// ---- reading files built by hand from the spec ----------------------------------------------

TEST(SafetensorsRead, HandBuiltFileFromSpec) {
  std::string dir = test_dir();
  std::string path = write_bytes(dir, "a.safetensors",
                                 make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f32_bytes({1.0f, 2.0f})));
  auto file = MappedSafetensors::open(path);
  ASSERT_EQ(file->header().tensors.size(), 1u);
  const TensorInfo* a = file->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, StDType::F32);
  EXPECT_EQ(a->shape, std::vector<int64_t>{2});
  EXPECT_EQ(a->begin, 0u);
  EXPECT_EQ(a->end, 8u);
  EXPECT_EQ(file->header().data_offset, 8u + 54u);
  float values[2];
  std::memcpy(values, file->data(*a), 8);
  EXPECT_EQ(values[0], 1.0f);
  EXPECT_EQ(values[1], 2.0f);
  EXPECT_TRUE(file->header().metadata.empty());
  EXPECT_EQ(file->find("b"), nullptr);
}

TEST(SafetensorsRead, HandBuiltFileWithMetadataPaddingAndOffsetOrder) {
  // Keys in the JSON out of data order, metadata last, header padded with spaces; a 0-d
  // I64, an empty U8 tensor and a BF16 pair.
  std::string header =
      R"({"z":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
      R"("e":{"dtype":"U8","shape":[3,0],"data_offsets":[12,12]},)"
      R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},)"
      R"("__metadata__":{"format":"pt","note":"x"}}    )";
  std::string data = std::string("\x2a\0\0\0\0\0\0\0", 8) + std::string("\x80\x3f\x00\x40", 4);  // 42; bf16 1.0, 2.0
  auto h = parse(make_file(header, data), "ok.safetensors");
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensors[0].name, "z");  // data order
  EXPECT_EQ(h.tensors[1].name, "b");
  EXPECT_EQ(h.tensors[2].name, "e");
  EXPECT_TRUE(h.tensors[0].shape.empty());
  EXPECT_EQ(h.tensors[0].numel(), 1u);
  EXPECT_EQ(h.tensors[2].shape, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(h.tensors[2].numel(), 0u);
  EXPECT_EQ(h.tensors[1].dtype, StDType::BF16);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.metadata.at("note"), "x");
  EXPECT_EQ(h.data_size, 12u);
}

TEST(SafetensorsRead, EmptyFileWithNoTensors) {
  auto h = parse(make_file("{}      ", ""));
  EXPECT_TRUE(h.tensors.empty());
  EXPECT_EQ(h.data_offset, 16u);
}

TEST(SafetensorsRead, NullMetadataAndUnknownTensorFieldsAreAccepted) {
  auto h = parse(make_file(R"({"__metadata__":null,"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":1}})", "x"));
  ASSERT_EQ(h.tensors.size(), 1u);
}

TEST(SafetensorsRead, Float8IsReadRaw) {
  auto h = parse(make_file(R"({"f":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]},"g":{"dtype":"F8_E5M2","shape":[1],"data_offsets":[2,3]}})",
                           "abc"));
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].dtype, StDType::F8_E4M3);
  EXPECT_EQ(h.tensors[1].dtype, StDType::F8_E5M2);
}

TEST(SafetensorsRead, DtypeTable) {
  const std::vector<std::pair<const char*, std::size_t>> rows = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},     {"I32", 4},
      {"I16", 2}, {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& [name, size] : rows) {
    auto dt = parse_dtype(name);
    ASSERT_TRUE(dt) << name;
    EXPECT_EQ(dtype_size(*dt), size) << name;
    EXPECT_STREQ(dtype_name(*dt), name);
  }
  EXPECT_FALSE(parse_dtype("f32"));
  EXPECT_FALSE(parse_dtype("U16"));
  EXPECT_FALSE(parse_dtype(""));
}

// ---- malformed files: each names the file and, where there is one, the tensor ---------------

TEST(SafetensorsMalformed, FileTooSmall) {
  std::string msg = error_of<SafetensorsError>([&] { parse(std::string("\x01\0\0", 3)); });
  EXPECT_HAS(msg, "bad.safetensors");
  EXPECT_HAS(msg, "too small");
}

TEST(SafetensorsMalformed, HeaderLengthPastEndOfFile) {
  std::string bytes = le64(100) + "{}";
  std::string msg = error_of<SafetensorsError>([&] { parse(bytes); });
  EXPECT_HAS(msg, "bad.safetensors");
  EXPECT_HAS(msg, "runs past the end of the file");
}

TEST(SafetensorsMalformed, HeaderLengthHugeDoesNotOverflow) {
  for (uint64_t n : {~uint64_t{0}, ~uint64_t{0} - 7, uint64_t{1} << 63, kSafetensorsMaxHeaderSize + 1}) {
    std::string msg = error_of<SafetensorsError>([&] { parse(le64(n) + "{}"); });
    EXPECT_HAS(msg, "exceeds the limit");
  }
}

TEST(SafetensorsMalformed, HeaderNotJson) {
  std::string msg = parse_error(R"({"a": {"dtype": )", "");
  EXPECT_HAS(msg, "not valid JSON");
}

TEST(SafetensorsMalformed, HeaderInvalidUtf8) {
  std::string msg = parse_error("{\"\xff\xfe\":{}}", "");
  EXPECT_HAS(msg, "not valid JSON");
}

TEST(SafetensorsMalformed, HeaderNotAnObject) {
  EXPECT_HAS(parse_error("[1, 2]  ", ""), "not a JSON object");
  EXPECT_HAS(parse_error("\"text\"", ""), "not a JSON object");
}

TEST(SafetensorsMalformed, TrailingGarbageAfterJson) {
  EXPECT_HAS(parse_error("{} x", ""), "not valid JSON");
}

TEST(SafetensorsMalformed, TensorEntryNotAnObject) {
  std::string msg = parse_error(R"({"w":[1,2]})", "");
  EXPECT_HAS(msg, "tensor 'w'");
}

TEST(SafetensorsMalformed, UnknownDtype) {
  std::string msg = parse_error(R"({"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", std::string(16, 'x'));
  EXPECT_HAS(msg, "tensor 'w'");
  EXPECT_HAS(msg, "unknown dtype \"F128\"");
}

TEST(SafetensorsMalformed, DtypeNotAString) {
  EXPECT_HAS(parse_error(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", "xxxx"), "tensor 'w'");
}

TEST(SafetensorsMalformed, MissingFields) {
  EXPECT_HAS(parse_error(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", "xxxx"), "missing \"dtype\"");
  EXPECT_HAS(parse_error(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", "xxxx"), "missing \"shape\"");
  EXPECT_HAS(parse_error(R"({"w":{"dtype":"F32","shape":[1]}})", "xxxx"), "missing \"data_offsets\"");
}

TEST(SafetensorsMalformed, NegativeShapeEntry) {
  std::string msg = parse_error(R"({"w":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,4]}})", "xxxx");
  EXPECT_HAS(msg, "tensor 'w'");
  EXPECT_HAS(msg, "negative");
}

TEST(SafetensorsMalformed, NonIntegerShapeEntry) {
  std::string msg = parse_error(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "xxxx");
  EXPECT_HAS(msg, "tensor 'w'");
  EXPECT_HAS(msg, "not a non-negative integer");
  EXPECT_HAS(parse_error(R"({"w":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", "xxxx"), "tensor 'w'");
  EXPECT_HAS(parse_error(R"({"w":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", "xxxx"), "not an array");
}

TEST(SafetensorsMalformed, ShapeProductOverflows) {
  std::string msg =
      parse_error(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,0]}})", "");
  EXPECT_HAS(msg, "tensor 'w'");
  EXPECT_HAS(msg, "overflows");
  // numel fits but numel * dtype size does not
  EXPECT_HAS(parse_error(R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})", ""), "overflows");
  // a dimension beyond int64
  EXPECT_HAS(parse_error(R"({"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]}})", ""), "too large");
}

TEST(SafetensorsMalformed, DataOffsetsWrongForm) {
  EXPECT_HAS(parse_error(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", "x"), "tensor 'w'");
  EXPECT_HAS(parse_error(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", "x"), "negative");
  EXPECT_HAS(parse_error(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1.0]}})", "x"), "not a non-negative integer");
}

TEST(SafetensorsMalformed, BeginGreaterThanEnd) {
  std::string msg = parse_error(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", "xxxx");
  EXPECT_HAS(msg, "tensor 'w'");
  EXPECT_HAS(msg, "begin 4 > end 0");
}

TEST(SafetensorsMalformed, OffsetsBeyondDataSection) {
  std::string msg = parse_error(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "xxxx");
  EXPECT_HAS(msg, "tensor 'w'");
  EXPECT_HAS(msg, "past the end of the data section");
  // offsets near 2^63 must not wrap around
  EXPECT_HAS(parse_error(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[9223372036854775806,9223372036854775807]}})", "x"),
             "past the end");
}

TEST(SafetensorsMalformed, SizeDoesNotMatchShape) {
  std::string msg = parse_error(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "xxxxxxxx");
  EXPECT_HAS(msg, "tensor 'w'");
  EXPECT_HAS(msg, "needs 12");
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  std::string msg = parse_error(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      std::string(12, 'x'));
  EXPECT_HAS(msg, "tensor 'b'");
  EXPECT_HAS(msg, "overlap tensor 'a'");
  // the same bytes claimed twice
  EXPECT_HAS(parse_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                         "xxxx"),
             "overlap");
}

TEST(SafetensorsMalformed, GapBetweenTensorsIsRejectedLikeTheRustCrate) {
  std::string msg = parse_error(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
      std::string(12, 'x'));
  EXPECT_HAS(msg, "tensor 'b'");
  EXPECT_HAS(msg, "gap");
  EXPECT_HAS(parse_error(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", "xx"), "gap");
}

TEST(SafetensorsMalformed, TrailingBytesAreRejectedLikeTheRustCrate) {
  std::string msg = parse_error(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "xyz");
  EXPECT_HAS(msg, "2 trailing bytes");
}

TEST(SafetensorsMalformed, DuplicateTensorNames) {
  std::string msg = parse_error(
      R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", "xy");
  EXPECT_HAS(msg, "duplicate tensor name 'a'");
  EXPECT_HAS(parse_error(R"({"a":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})", "x"), "duplicate key 'dtype'");
}

TEST(SafetensorsMalformed, MetadataNotStrings) {
  std::string msg = parse_error(R"({"__metadata__":{"format":"pt","step":3}})", "");
  EXPECT_HAS(msg, "__metadata__");
  EXPECT_HAS(msg, "'step'");
  EXPECT_HAS(parse_error(R"({"__metadata__":["pt"]})", ""), "\"__metadata__\" is not a JSON object");
}

TEST(SafetensorsMalformed, MappedOpenOfMissingFileAndDirectory) {
  std::string dir = test_dir();
  std::string missing = dir + "/missing.safetensors";
  EXPECT_HAS(error_of<SafetensorsError>([&] { MappedSafetensors::open(missing); }), missing);
  EXPECT_HAS(error_of<SafetensorsError>([&] { MappedSafetensors::open(dir); }), "not a regular file");
  std::string empty = write_bytes(dir, "empty.safetensors", "");
  EXPECT_HAS(error_of<SafetensorsError>([&] { MappedSafetensors::open(empty); }), "too small");
  std::string bad = write_bytes(dir, "bad.safetensors", make_file("{\"a\":1}", ""));
  std::string msg = error_of<SafetensorsError>([&] { MappedSafetensors::open(bad); });
  EXPECT_HAS(msg, bad);
  EXPECT_HAS(msg, "tensor 'a'");
}

// Random corruptions of a valid file: the parser throws SafetensorsError or succeeds, never
// anything else (the libFuzzer target does this at scale under ASan/UBSan).
TEST(SafetensorsMalformed, RandomCorruptionsOnlyThrowSafetensorsError) {
  const std::string good = make_file(
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I8","shape":[2,1],"data_offsets":[8,10]}})",
      f32_bytes({1.0f, 2.0f}) + "xy");
  std::mt19937 rng(1234);
  int ok = 0, rejected = 0;
  for (int i = 0; i < 5000; ++i) {
    std::string bytes = good;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 4) {
        case 0: bytes[rng() % bytes.size()] = static_cast<char>(rng()); break;
        case 1: bytes.resize(rng() % bytes.size()); break;
        case 2: bytes.insert(rng() % (bytes.size() + 1), 1, "0123456789{}[],:\"-.e"[rng() % 20]); break;
        case 3: bytes.erase(rng() % bytes.size(), 1); break;
      }
      if (bytes.empty()) break;
    }
    try {
      auto h = parse(bytes);
      for (const auto& t : h.tensors) ASSERT_LE(h.data_offset + t.end, bytes.size());
      ++ok;
    } catch (const SafetensorsError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
}

// ---- writer -----------------------------------------------------------------------------

// The byte sequences asserted by the Rust crate's own tests (safetensors/src/tensor.rs:
// test_serialization_forced_alignement, test_empty).
TEST(SafetensorsWrite, MatchesReferenceImplementationBytes) {
  float values[6] = {0, 1, 2, 3, 4, 5};
  std::vector<RawTensor> t = {{"attn0", StDType::F32, {1, 1, 2, 3}, values, sizeof values}};
  std::string header = safetensors_header_bytes("x", t, {});
  const std::string expected_json = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
  EXPECT_EQ(header, le64(72) + expected_json + std::string(7, ' '));

  EXPECT_EQ(safetensors_header_bytes("x", {}, {}), le64(8) + "{}" + std::string(6, ' '));
  EXPECT_EQ(safetensors_header_bytes("x", {}, {{"framework", "pt"}}),
            le64(40) + R"({"__metadata__":{"framework":"pt"}})" + std::string(5, ' '));
}

TEST(SafetensorsWrite, OutputParsedIndependently) {
  std::string dir = test_dir();
  std::string path = dir + "/w.safetensors";
  const double d[3] = {1.5, -2.25, 1e300};
  const uint16_t h[3] = {0x3c00, 0x4000, 0x7e00};  // odd count of 2-byte elements before wider ones in input order
  const int32_t i[4] = {1, -2, 3, -4};
  const uint8_t b[1] = {1};
  const int64_t z[1] = {-7};
  std::vector<RawTensor> tensors = {
      {"half", StDType::F16, {3}, h, sizeof h},  {"int", StDType::I32, {2, 2}, i, sizeof i},
      {"dbl", StDType::F64, {3}, d, sizeof d},   {"flag", StDType::BOOL, {1}, b, 1},
      {"scalar", StDType::I64, {}, z, sizeof z}, {"empty", StDType::F32, {0, 5}, nullptr, 0},
  };
  write_safetensors(path, tensors, {{"format", "pt"}, {"step", "12"}});

  std::string bytes = read_file(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | static_cast<uint8_t>(bytes[k]);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_LE(8 + n, bytes.size());
  std::string header_text = bytes.substr(8, n);
  auto j = nlohmann::json::parse(header_text);
  EXPECT_EQ(header_text.find_last_not_of(' ') + 1, header_text.find_last_of('}') + 1);  // padding is spaces
  EXPECT_EQ(j.at("__metadata__"), (nlohmann::json{{"format", "pt"}, {"step", "12"}}));
  const uint64_t data_start = 8 + n;
  uint64_t covered = 0;
  for (const auto& t : tensors) {
    SCOPED_TRACE(t.name);
    ASSERT_TRUE(j.contains(t.name));
    const auto& e = j.at(t.name);
    EXPECT_EQ(e.at("dtype").get<std::string>(), dtype_name(t.dtype));
    EXPECT_EQ(e.at("shape").get<std::vector<int64_t>>(), t.shape);
    uint64_t begin = e.at("data_offsets").at(0).get<uint64_t>(), end = e.at("data_offsets").at(1).get<uint64_t>();
    EXPECT_EQ(end - begin, t.nbytes);
    EXPECT_EQ((data_start + begin) % dtype_size(t.dtype), 0u) << "misaligned";
    ASSERT_LE(data_start + end, bytes.size());
    if (t.nbytes) EXPECT_EQ(std::memcmp(bytes.data() + data_start + begin, t.data, t.nbytes), 0);
    covered += t.nbytes;
  }
  EXPECT_EQ(data_start + covered, bytes.size());
  EXPECT_EQ(j.size(), tensors.size() + 1);

  // and our reader agrees
  auto file = MappedSafetensors::open(path);
  EXPECT_EQ(file->header().tensors.size(), tensors.size());
  EXPECT_EQ(file->header().metadata.at("step"), "12");
}

TEST(SafetensorsWrite, SortedByAlignmentThenName) {
  const uint8_t u[1] = {0};
  const float f[1] = {0};
  const double d[1] = {0};
  std::vector<RawTensor> t = {{"b", StDType::U8, {1}, u, 1}, {"a", StDType::U8, {1}, u, 1},
                              {"c", StDType::F32, {1}, f, 4}, {"d", StDType::F64, {1}, d, 8}};
  std::vector<std::size_t> order;
  safetensors_header_bytes("x", t, {}, &order);
  EXPECT_EQ(order, (std::vector<std::size_t>{3, 2, 1, 0}));
}

TEST(SafetensorsWrite, RejectsBadInputNamingTheTensor) {
  std::string dir = test_dir();
  std::string path = dir + "/w.safetensors";
  const float f[2] = {1, 2};
  auto err = [&](std::vector<RawTensor> t) { return error_of<SafetensorsError>([&] { write_safetensors(path, t); }); };
  EXPECT_HAS(err({{"w", StDType::F32, {3}, f, 8}}), "tensor 'w'");
  EXPECT_HAS(err({{"w", StDType::F32, {-2}, f, 8}}), "negative");
  EXPECT_HAS(err({{"w", StDType::F32, {2}, f, 8}, {"w", StDType::F32, {2}, f, 8}}), "duplicate");
  EXPECT_HAS(err({{"__metadata__", StDType::F32, {2}, f, 8}}), "__metadata__");
  EXPECT_HAS(err({{"", StDType::F32, {2}, f, 8}}), "empty name");
  EXPECT_HAS(err({{"w", StDType::F32, {2}, nullptr, 8}}), "no data");
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(dir));  // no temp files left behind
}

TEST(SafetensorsWrite, FailedWriteLeavesExistingFileUntouched) {
  std::string dir = test_dir();
  std::string path = dir + "/w.safetensors";
  const float f[2] = {1, 2};
  write_safetensors(path, {{"w", StDType::F32, {2}, f, 8}});
  std::string before = read_file(path);
  EXPECT_THROW(write_safetensors(path, {{"w", StDType::F32, {2}, f, 8}, {"v", StDType::F32, {5}, f, 8}}), SafetensorsError);
  EXPECT_EQ(read_file(path), before);
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 1u);
}

TEST(AtomicWriteFileWith, StreamsAndCleansUpOnException) {
  std::string dir = test_dir();
  std::string path = dir + "/sub/out.bin";
  atomic_write_file_with(path, [](std::FILE* f) { std::fputs("hello", f); });
  EXPECT_EQ(read_file(path), "hello");
  EXPECT_THROW(atomic_write_file_with(path,
                                      [](std::FILE* f) {
                                        std::fputs("partial", f);
                                        throw std::runtime_error("stop");
                                      }),
               std::runtime_error);
  EXPECT_EQ(read_file(path), "hello");
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir + "/sub")) ++entries;
  EXPECT_EQ(entries, 1u);
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::others_read, fs::perms::others_read);
}

}  // namespace
