// safetensors <-> torch::Tensor and Hugging Face sharded checkpoint folders.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>

#include "core/model/safetensors_torch.h"
#include "core/util/fs.h"
#include "tests/support/error_of.h"
#include "tests/support/test_dir.h"

namespace {

namespace fs = std::filesystem;
using namespace grpo::core;
using grpo::testing::error_of;

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

std::string test_dir() { return grpo::testing::fresh_test_dir("torch"); }

// A tensor of `type` whose bytes are random (bool: 0/1), so that round trips are checked
// bit for bit; a float that came out NaN or infinite becomes 0.5 (weights with those are
// refused on load: NonFiniteValuesAreAnErrorNamingFileAndTensor).
torch::Tensor random_tensor(std::vector<int64_t> shape, c10::ScalarType type, std::mt19937& rng) {
  torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(type));
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  const std::size_t n = static_cast<std::size_t>(t.numel()) * t.element_size();
  for (std::size_t i = 0; i < n; ++i) p[i] = type == torch::kBool ? (rng() & 1) : static_cast<uint8_t>(rng());
  if (c10::isFloatingType(type)) t.masked_fill_(torch::isfinite(t).logical_not(), 0.5);
  return t;
}

bool bit_identical(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  torch::Tensor ca = a.contiguous(), cb = b.contiguous();
  const std::size_t n = static_cast<std::size_t>(ca.numel()) * ca.element_size();
  return n == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), n) == 0;
}

void expect_same(const NamedTensorList& expected, const NamedTensorList& actual) {
  ASSERT_EQ(expected.size(), actual.size());
  std::map<std::string, torch::Tensor> by_name(actual.begin(), actual.end());
  ASSERT_EQ(by_name.size(), actual.size());
  for (const auto& [name, t] : expected) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(by_name.count(name));
    EXPECT_TRUE(bit_identical(t, by_name.at(name))) << t.sizes() << " vs " << by_name.at(name).sizes();
  }
}

const std::vector<c10::ScalarType> kAllTypes = {torch::kDouble, torch::kFloat, torch::kHalf,  torch::kBFloat16,
                                                torch::kLong,   torch::kInt,   torch::kShort, torch::kChar,
                                                torch::kByte,   torch::kBool};

TEST(SafetensorsTorch, DtypeMapping) {
  for (auto type : kAllTypes) {
    auto st = to_st_dtype(type);
    ASSERT_TRUE(st) << type;
    EXPECT_EQ(to_torch_dtype(*st), type);
    EXPECT_EQ(dtype_size(*st), c10::elementSize(type));
  }
  EXPECT_FALSE(to_st_dtype(torch::kComplexFloat));
  EXPECT_FALSE(to_torch_dtype(StDType::F8_E4M3));
}

TEST(SafetensorsTorch, RoundTripEveryDtypeBitIdentical) {
  std::string dir = test_dir();
  std::mt19937 rng(7);
  NamedTensorList tensors;
  for (auto type : kAllTypes) {
    std::string base = c10::toString(type);
    tensors.emplace_back(base + ".matrix", random_tensor({3, 5}, type, rng));
    tensors.emplace_back(base + ".odd", random_tensor({7}, type, rng));
    tensors.emplace_back(base + ".scalar", random_tensor({}, type, rng));
    tensors.emplace_back(base + ".empty", random_tensor({0}, type, rng));
    tensors.emplace_back(base + ".empty2d", random_tensor({4, 0, 2}, type, rng));
  }
  // non-contiguous inputs are saved as their logical (contiguous) values
  tensors.emplace_back("transposed", random_tensor({4, 6}, torch::kFloat, rng).t());
  tensors.emplace_back("sliced", random_tensor({10}, torch::kLong, rng).slice(0, 1, 9, 3));

  const std::string path = dir + "/all.safetensors";
  save_safetensors(path, tensors);
  std::map<std::string, std::string> metadata;
  NamedTensorList loaded = load_safetensors(path, &metadata);
  expect_same(tensors, loaded);
  EXPECT_EQ(metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  for (const auto& [name, t] : loaded) {
    EXPECT_TRUE(t.is_contiguous()) << name;
    EXPECT_EQ(t.device(), torch::Device(torch::kCPU)) << name;
  }

  // every tensor is aligned to its element size within the file, so an mmap view would be too
  auto file = MappedSafetensors::open(path);
  for (const auto& info : file->header().tensors)
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(file->data(info)) % dtype_size(info.dtype), 0u) << info.name;
}

// A NaN or an infinity in F64, F32, F16 or BF16 data: loading is an error naming the file, the
// tensor, how many values and the first (C order); integers with the same bits are fine.
TEST(SafetensorsTorch, NonFiniteValuesAreAnErrorNamingFileAndTensor) {
  const std::string dir = test_dir();
  const std::string path = dir + "/w.safetensors";
  struct Bad {
    double value;
    const char* name;
  };
  for (auto type : {torch::kDouble, torch::kFloat, torch::kHalf, torch::kBFloat16})
    for (const Bad& bad : {Bad{std::nan(""), "NaN"}, Bad{INFINITY, "inf"}, Bad{-INFINITY, "-inf"}}) {
      SCOPED_TRACE(std::string(c10::toString(type)) + " " + bad.name);
      torch::Tensor w = torch::zeros({2, 3}, type);
      w[1][0] = bad.value;  // flat index 3
      w[1][2] = bad.value;
      save_safetensors(path, {{"ok", torch::ones({4}, type)}, {"w", w}});
      const std::string msg = error_of<SafetensorsError>([&] { load_safetensors(path); });
      EXPECT_HAS(msg, "safetensors file '" + path + "': tensor 'w': 2 of its 6 values are not finite (the first, at [1, 0], is " +
                          bad.name + ")");
    }
  // 0x7F800000 is +inf as F32, an ordinary number as I32.
  save_safetensors(path, {{"i", torch::full({3}, 0x7F800000, torch::kInt)}, {"l", torch::full({2}, -1, torch::kLong)}});
  EXPECT_EQ(load_safetensors(path).size(), 2u);
}

// Data at an odd offset (other writers do not align): the scan reads it all the same.
TEST(SafetensorsTorch, NonFiniteValueAtAnUnalignedOffsetIsFound) {
  const std::string dir = test_dir();
  const std::string header =
      R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"f":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  bytes += header;
  bytes += std::string("\x07\x00\x00\x80\x3f\x00\x00\xc0\x7f", 9);  // 7; 1.0f, NaN
  std::ofstream(dir + "/u.safetensors", std::ios::binary) << bytes;
  const std::string msg = error_of<SafetensorsError>([&] { load_safetensors(dir + "/u.safetensors"); });
  EXPECT_HAS(msg, "tensor 'f': 1 of its 2 values are not finite (the first, at [1], is NaN)");
}

TEST(SafetensorsTorch, LoadedTensorsOutliveTheFile) {
  std::string dir = test_dir();
  const std::string path = dir + "/t.safetensors";
  torch::Tensor t = torch::arange(6, torch::kFloat).reshape({2, 3});
  save_safetensors(path, {{"t", t}}, {{"format", "pt"}, {"origin", "test"}});
  std::map<std::string, std::string> metadata;
  NamedTensorList loaded = load_safetensors(path, &metadata);
  fs::remove(path);
  ASSERT_EQ(loaded.size(), 1u);
  loaded[0].second.add_(1);  // writable, owns its memory
  EXPECT_TRUE(torch::equal(loaded[0].second, t + 1));
  EXPECT_EQ(metadata.at("origin"), "test");
}

TEST(SafetensorsTorch, ReadsHandBuiltFile) {
  std::string dir = test_dir();
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  bytes += header;
  bytes += std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);
  std::ofstream(dir + "/a.safetensors", std::ios::binary) << bytes;
  NamedTensorList loaded = load_safetensors(dir + "/a.safetensors");
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].first, "a");
  EXPECT_TRUE(torch::equal(loaded[0].second, torch::tensor({1.0f, 2.0f})));
}

TEST(SafetensorsTorch, Float8TensorIsAnErrorNamingIt) {
  std::string dir = test_dir();
  const std::string header = R"({"f8":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  bytes += header + "ab";
  const std::string path = dir + "/f8.safetensors";
  std::ofstream(path, std::ios::binary) << bytes;
  std::string msg = error_of<SafetensorsError>([&] { load_safetensors(path); });
  EXPECT_HAS(msg, "tensor 'f8'");
  EXPECT_HAS(msg, "F8_E4M3");
  EXPECT_HAS(msg, path);
}

TEST(SafetensorsTorch, UnsupportedDtypeMidListLeavesExistingFileUntouched) {
  std::string dir = test_dir();
  const std::string path = dir + "/m.safetensors";
  save_safetensors(path, {{"a", torch::ones({2})}});
  const std::string before = read_file(path);
  NamedTensorList bad = {{"a", torch::zeros({3})}, {"c", torch::zeros({2}, torch::kComplexFloat)}, {"d", torch::zeros({1})}};
  std::string msg = error_of<SafetensorsError>([&] { save_safetensors(path, bad); });
  EXPECT_HAS(msg, "tensor 'c'");
  EXPECT_HAS(msg, path);
  EXPECT_EQ(read_file(path), before);
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 1u);
  EXPECT_THROW(save_safetensors(path, {{"u", torch::Tensor()}}), SafetensorsError);
}

// ---- checkpoint folders ---------------------------------------------------------------------

NamedTensorList checkpoint_tensors() {
  // 40, 40, 100, 8 bytes
  return {{"model.embed", torch::arange(10, torch::kFloat)},
          {"model.layers.0.w", torch::arange(20, torch::kShort)},
          {"model.layers.1.w", torch::arange(25, torch::kInt)},
          {"lm_head.bias", torch::tensor({static_cast<int64_t>(-3)})}};
}

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

TEST(SafetensorsCheckpoint, ShardedRoundTripAndIndex) {
  std::string dir = test_dir() + "/ckpt";
  NamedTensorList tensors = checkpoint_tensors();
  save_checkpoint_tensors(dir, tensors, 64);
  EXPECT_EQ(files_in(dir), (std::set<std::string>{"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                                                  "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors",
                                                  "model.safetensors.index.json"}));
  const std::string text = read_file(dir + "/model.safetensors.index.json");
  EXPECT_EQ(text.rfind("{\n  \"metadata\": {\n    \"total_size\": 188\n  },\n  \"weight_map\": {\n", 0), 0u) << text;
  EXPECT_EQ(text.back(), '\n');
  auto index = nlohmann::json::parse(text);
  EXPECT_EQ(index.at("metadata").at("total_size"), 188);
  EXPECT_EQ(index.at("weight_map"), (nlohmann::json{{"model.embed", "model-00001-of-00004.safetensors"},
                                                    {"model.layers.0.w", "model-00002-of-00004.safetensors"},
                                                    {"model.layers.1.w", "model-00003-of-00004.safetensors"},
                                                    {"lm_head.bias", "model-00004-of-00004.safetensors"}}));
  // each shard is a standalone safetensors file
  auto shard = load_safetensors(dir + "/model-00003-of-00004.safetensors");
  ASSERT_EQ(shard.size(), 1u);
  EXPECT_EQ(shard[0].first, "model.layers.1.w");

  NamedTensorList loaded = load_checkpoint_tensors(dir);
  expect_same(tensors, loaded);
  EXPECT_EQ(loaded[0].first, "model.embed");  // shard order, then data order
  EXPECT_EQ(loaded[3].first, "lm_head.bias");
}

TEST(SafetensorsCheckpoint, TensorsShareShardsUpToTheLimit) {
  std::string dir = test_dir();
  save_checkpoint_tensors(dir, checkpoint_tensors(), 100);  // [40+40], [100], [8]
  auto index = nlohmann::json::parse(read_file(dir + "/model.safetensors.index.json"));
  EXPECT_EQ(index.at("weight_map").at("model.embed"), "model-00001-of-00003.safetensors");
  EXPECT_EQ(index.at("weight_map").at("model.layers.0.w"), "model-00001-of-00003.safetensors");
  EXPECT_EQ(index.at("weight_map").at("model.layers.1.w"), "model-00002-of-00003.safetensors");
  EXPECT_EQ(index.at("weight_map").at("lm_head.bias"), "model-00003-of-00003.safetensors");
  expect_same(checkpoint_tensors(), load_checkpoint_tensors(dir));
}

TEST(SafetensorsCheckpoint, SingleFileWhenSmallEnough) {
  std::string dir = test_dir();
  save_checkpoint_tensors(dir, checkpoint_tensors(), 188);
  EXPECT_EQ(files_in(dir), (std::set<std::string>{"model.safetensors"}));
  expect_same(checkpoint_tensors(), load_checkpoint_tensors(dir));
}

TEST(SafetensorsCheckpoint, ResaveRemovesStaleFiles) {
  std::string dir = test_dir();
  std::ofstream(dir + "/config.json") << "{}";
  save_checkpoint_tensors(dir, checkpoint_tensors(), 64);  // 4 shards
  NamedTensorList fewer = {{"x", torch::ones({30})}, {"y", torch::zeros({30})}};
  save_checkpoint_tensors(dir, fewer, 150);  // 2 shards
  EXPECT_EQ(files_in(dir), (std::set<std::string>{"config.json", "model-00001-of-00002.safetensors",
                                                  "model-00002-of-00002.safetensors", "model.safetensors.index.json"}));
  expect_same(fewer, load_checkpoint_tensors(dir));
  save_checkpoint_tensors(dir, checkpoint_tensors(), 1 << 20);  // single file
  EXPECT_EQ(files_in(dir), (std::set<std::string>{"config.json", "model.safetensors"}));
  expect_same(checkpoint_tensors(), load_checkpoint_tensors(dir));
  save_checkpoint_tensors(dir, fewer, 150);  // sharded again: model.safetensors goes
  EXPECT_EQ(files_in(dir), (std::set<std::string>{"config.json", "model-00001-of-00002.safetensors",
                                                  "model-00002-of-00002.safetensors", "model.safetensors.index.json"}));
}

TEST(SafetensorsCheckpoint, FailedSaveWritesNothing) {
  std::string dir = test_dir();
  save_checkpoint_tensors(dir, checkpoint_tensors(), 64);
  auto before = files_in(dir);
  const std::string index_before = read_file(dir + "/model.safetensors.index.json");
  NamedTensorList bad = checkpoint_tensors();
  bad.emplace_back("complex", torch::zeros({2}, torch::kComplexDouble));
  std::string msg = error_of<SafetensorsError>([&] { save_checkpoint_tensors(dir, bad, 64); });
  EXPECT_HAS(msg, "tensor 'complex'");
  EXPECT_EQ(files_in(dir), before);
  EXPECT_EQ(read_file(dir + "/model.safetensors.index.json"), index_before);
}

TEST(SafetensorsCheckpoint, NeitherFileIsAnErrorNamingTheFolder) {
  std::string dir = test_dir();
  std::string msg = error_of<SafetensorsError>([&] { load_checkpoint_tensors(dir); });
  EXPECT_HAS(msg, dir);
  EXPECT_HAS(msg, "model.safetensors");
}

// A checkpoint with an infinity in one shard: check_checkpoint_finite (a scan, nothing loaded)
// and load_checkpoint_tensors both name that shard and the tensor; a clean one passes.
TEST(SafetensorsCheckpoint, NonFiniteValueInAShardIsFoundWithoutLoading) {
  const std::string dir = test_dir();
  save_checkpoint_tensors(dir, checkpoint_tensors(), 64);  // 4 shards
  EXPECT_NO_THROW(check_checkpoint_finite(dir));
  NamedTensorList bad = checkpoint_tensors();
  for (auto& [name, t] : bad)
    if (name == "model.embed") t[4] = -INFINITY;  // float32 [10], the first shard
  save_checkpoint_tensors(dir, bad, 64);
  const std::string shard = "safetensors file '" + dir +
                            "/model-00001-of-00004.safetensors': tensor 'model.embed': 1 of its 10 values are not finite "
                            "(the first, at [4], is -inf)";
  EXPECT_HAS(error_of<SafetensorsError>([&] { check_checkpoint_finite(dir); }), shard);
  EXPECT_HAS(error_of<SafetensorsError>([&] { load_checkpoint_tensors(dir); }), shard);
}

// A sharded checkpoint whose index is then replaced by `index`.
std::string with_index(const nlohmann::json& index) {
  std::string dir = test_dir();
  save_checkpoint_tensors(dir, checkpoint_tensors(), 100);  // 3 shards
  atomic_write_file(dir + "/model.safetensors.index.json", index.dump());
  return dir;
}

const char* kShard1 = "model-00001-of-00003.safetensors";
const char* kShard2 = "model-00002-of-00003.safetensors";
const char* kShard3 = "model-00003-of-00003.safetensors";

nlohmann::json good_weight_map() {
  return {{"model.embed", kShard1}, {"model.layers.0.w", kShard1}, {"model.layers.1.w", kShard2}, {"lm_head.bias", kShard3}};
}

TEST(SafetensorsCheckpointIndex, NotJsonOrNoWeightMap) {
  std::string dir = with_index(nlohmann::json::object());
  std::string msg = error_of<SafetensorsError>([&] { load_checkpoint_tensors(dir); });
  EXPECT_HAS(msg, "model.safetensors.index.json");
  EXPECT_HAS(msg, "missing \"weight_map\"");
  atomic_write_file(dir + "/model.safetensors.index.json", "{not json");
  EXPECT_HAS(error_of<SafetensorsError>([&] { load_checkpoint_tensors(dir); }), "not valid JSON");
  atomic_write_file(dir + "/model.safetensors.index.json", R"({"weight_map": ["a"]})");
  EXPECT_HAS(error_of<SafetensorsError>([&] { load_checkpoint_tensors(dir); }), "\"weight_map\" is not a JSON object");
  atomic_write_file(dir + "/model.safetensors.index.json", R"({"weight_map": {"a": 1}})");
  EXPECT_HAS(error_of<SafetensorsError>([&] { load_checkpoint_tensors(dir); }), "tensor 'a'");
}

TEST(SafetensorsCheckpointIndex, MissingShardFile) {
  auto wm = good_weight_map();
  wm["extra"] = "model-00009-of-00009.safetensors";
  std::string dir = with_index({{"weight_map", wm}});
  std::string msg = error_of<SafetensorsError>([&] { load_checkpoint_tensors(dir); });
  EXPECT_HAS(msg, "model-00009-of-00009.safetensors");
  EXPECT_HAS(msg, "does not exist");
  EXPECT_HAS(msg, "tensor 'extra'");
}

TEST(SafetensorsCheckpointIndex, ShardNameMustBeAFileName) {
  auto wm = good_weight_map();
  wm["model.embed"] = "../elsewhere/model.safetensors";
  std::string dir = with_index({{"weight_map", wm}});
  EXPECT_HAS(error_of<SafetensorsError>([&] { load_checkpoint_tensors(dir); }), "not a file name");
}

TEST(SafetensorsCheckpointIndex, TensorMappedToTheWrongShard) {
  auto wm = good_weight_map();
  wm["model.layers.0.w"] = kShard2;  // it is in shard 1
  std::string dir = with_index({{"weight_map", wm}});
  std::string msg = error_of<SafetensorsError>([&] { load_checkpoint_tensors(dir); });
  EXPECT_HAS(msg, "tensor 'model.layers.0.w'");
  EXPECT_HAS(msg, kShard1);
}

TEST(SafetensorsCheckpointIndex, TensorListedButNotInItsShard) {
  auto wm = good_weight_map();
  wm["ghost"] = kShard3;
  std::string dir = with_index({{"weight_map", wm}});
  std::string msg = error_of<SafetensorsError>([&] { load_checkpoint_tensors(dir); });
  EXPECT_HAS(msg, "tensor 'ghost'");
  EXPECT_HAS(msg, "does not hold it");
}

TEST(SafetensorsCheckpointIndex, TensorInTwoShards) {
  std::string dir = with_index({{"weight_map", good_weight_map()}});
  // shard 3 now also holds model.embed
  save_safetensors(dir + "/" + kShard3, {{"lm_head.bias", torch::tensor({int64_t{-3}})}, {"model.embed", torch::ones({10})}});
  std::string msg = error_of<SafetensorsError>([&] { load_checkpoint_tensors(dir); });
  EXPECT_HAS(msg, "tensor 'model.embed'");
  EXPECT_HAS(msg, kShard3);
}

TEST(SafetensorsCheckpointIndex, ShardHoldsUnlistedTensor) {
  auto wm = good_weight_map();
  wm.erase("lm_head.bias");
  std::string dir = with_index({{"weight_map", wm}});
  // shard 3 is not referenced any more, so it is not read; make shard 2 hold an unlisted one
  save_safetensors(dir + "/" + kShard2, {{"model.layers.1.w", torch::arange(25, torch::kInt)}, {"stray", torch::ones({1})}});
  std::string msg = error_of<SafetensorsError>([&] { load_checkpoint_tensors(dir); });
  EXPECT_HAS(msg, "tensor 'stray'");
  EXPECT_HAS(msg, "does not list");
}

TEST(SafetensorsCheckpointIndex, CorruptShardNamesTheShard) {
  std::string dir = with_index({{"weight_map", good_weight_map()}});
  atomic_write_file(dir + "/" + kShard2, "garbage!");
  std::string msg = error_of<SafetensorsError>([&] { load_checkpoint_tensors(dir); });
  EXPECT_HAS(msg, kShard2);
}

}  // namespace
