// TensorBoardWriter and CRC-32C, checked through an independent reader (tfevents_reader.h) that
// recomputes every CRC bit by bit and decodes the protobuf itself.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/metrics/crc32c.h"
#include "core/metrics/tfevents.h"
#include "tests/metrics/tfevents_reader.h"
#include "tests/support/error_of.h"

namespace {

namespace fs = std::filesystem;
using grpo::core::TensorBoardWriter;
using grpo::testing::error_of;
using grpo::testing::read_tfevents;
using grpo::testing::TfEvent;


std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A fresh folder per test under the system temp dir, removed when the test passes.
class TfEventsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("grpo-tfevents-" + std::to_string(::getpid())) /
           (std::string(info->test_suite_name()) + "." + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_.parent_path());
  }
  std::string dir() const { return dir_.string(); }

 private:
  fs::path dir_;
};

// --- CRC-32C -------------------------------------------------------------------------------------------

TEST(Crc32c, PublishedCheckValues) {
  EXPECT_EQ(grpo::core::crc32c("123456789", 9), 0xE3069283u);
  // RFC 3720 (iSCSI) appendix B.4.
  std::vector<unsigned char> buf(32, 0x00);
  EXPECT_EQ(grpo::core::crc32c(buf.data(), buf.size()), 0x8A9136AAu);
  buf.assign(32, 0xFF);
  EXPECT_EQ(grpo::core::crc32c(buf.data(), buf.size()), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(grpo::core::crc32c(buf.data(), buf.size()), 0x46DD794Eu);
  EXPECT_EQ(grpo::core::crc32c(nullptr, 0), 0u);
}

// crc32c, by whichever path it takes on this CPU (SSE4.2 or the table), against the bit-by-bit
// definition (tfevents_reader.h) at every alignment and tail length, and in pieces.
TEST(Crc32c, EveryAlignmentAndLengthMatchesTheBitwiseDefinition) {
  std::vector<unsigned char> buf(1 << 16);
  std::uint32_t x = 12345;
  for (auto& b : buf) b = static_cast<unsigned char>((x = x * 1103515245u + 12345u) >> 16);
  for (std::size_t offset = 0; offset < 8; ++offset)
    for (std::size_t n = 0; n < 80; ++n)
      ASSERT_EQ(grpo::core::crc32c(buf.data() + offset, n), grpo::testing::reference_crc32c(buf.data() + offset, n)) << offset << " " << n;
  const std::uint32_t whole = grpo::testing::reference_crc32c(buf.data(), buf.size());
  EXPECT_EQ(grpo::core::crc32c(buf.data(), buf.size()), whole);
  const std::uint32_t head = grpo::core::crc32c(buf.data(), 1001);
  EXPECT_EQ(grpo::core::crc32c(buf.data() + 1001, buf.size() - 1001, head), whole);
}

TEST(Crc32c, MaskedLengthOfTheStandardHeaderRecord) {
  // Every event file TensorFlow or PyTorch writes opens with the 24-byte file_version record:
  // bytes 18 00 00 00 00 00 00 00 a3 7f 4b 22.
  const unsigned char length[8] = {0x18, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(grpo::core::masked_crc32c(length, 8), 0x224B7FA3u);
  EXPECT_EQ(grpo::core::mask_crc32c(grpo::core::crc32c(length, 8)), 0x224B7FA3u);
}

TEST(Crc32c, MatchesBitwiseReferenceOnRandomBuffers) {
  std::mt19937 rng(12345);
  for (std::size_t n : {1u, 2u, 3u, 7u, 8u, 9u, 15u, 16u, 17u, 63u, 64u, 255u, 1000u, 4097u}) {
    std::vector<unsigned char> buf(n);
    for (auto& b : buf) b = static_cast<unsigned char>(rng());
    const std::uint32_t expected = grpo::testing::reference_crc32c(buf.data(), n);
    EXPECT_EQ(grpo::core::crc32c(buf.data(), n), expected) << "n=" << n;
    EXPECT_EQ(grpo::core::masked_crc32c(buf.data(), n), grpo::testing::reference_masked_crc32c(buf.data(), n))
        << "n=" << n;
    // Checksumming in two pieces gives the checksum of the whole.
    const std::size_t cut = n / 3;
    EXPECT_EQ(grpo::core::crc32c(buf.data() + cut, n - cut, grpo::core::crc32c(buf.data(), cut)), expected)
        << "n=" << n;
  }
}

// --- TensorBoardWriter ---------------------------------------------------------------------------------

TEST_F(TfEventsTest, FileNameFollowsTensorBoardConvention) {
  TensorBoardWriter writer(dir());
  const fs::path path(writer.path());
  EXPECT_EQ(path.parent_path(), fs::path(dir()));
  const std::string name = path.filename().string();
  std::smatch m;
  ASSERT_TRUE(std::regex_match(name, m, std::regex(R"(events\.out\.tfevents\.(\d{10})\.(.+)\.(\d+))"))) << name;
  const long long stamp = std::stoll(m[1].str());
  EXPECT_LE(std::llabs(stamp - static_cast<long long>(std::time(nullptr))), 5);
  EXPECT_EQ(m[3].str(), std::to_string(::getpid()));
  EXPECT_EQ(grpo::testing::find_tfevents_file(dir()), writer.path());
}

TEST_F(TfEventsTest, FirstRecordDeclaresFileVersion) {
  const double before = TensorBoardWriter::now_seconds();
  TensorBoardWriter writer(dir());
  const double after = TensorBoardWriter::now_seconds();
  const std::vector<TfEvent> events = read_tfevents(writer.path());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[0].step, 0);
  EXPECT_GE(events[0].wall_time, before - 1e-3);
  EXPECT_LE(events[0].wall_time, after + 1e-3);
  EXPECT_TRUE(events[0].scalars.empty());
  EXPECT_FALSE(events[0].session_start);
  // The same header bytes TensorFlow and PyTorch write (a 24-byte Event), so any reader accepts it.
  const std::string bytes = read_bytes(writer.path());
  ASSERT_GE(bytes.size(), 12u);
  EXPECT_EQ(bytes.substr(0, 12), std::string("\x18\0\0\0\0\0\0\0\xa3\x7f\x4b\x22", 12));
  EXPECT_EQ(bytes.size(), 12u + 24u + 4u);
}

TEST_F(TfEventsTest, ScalarsRoundTrip) {
  TensorBoardWriter writer(dir());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  writer.write_scalars(1, {{"train/loss", 0.25}, {"train/reward", -3.5}, {"lr", 1e-3}, {"bad", nan}, {"zero", 0.0}},
                       1700000000.125);
  writer.write_scalars(std::int64_t{1} << 40, {{"inf", inf}, {"train/loss", 123456.789}, {"minus_inf", -inf}});
  const double now = TensorBoardWriter::now_seconds();
  writer.write_scalars(7, {});

  const std::vector<TfEvent> events = read_tfevents(writer.path());
  ASSERT_EQ(events.size(), 4u);

  const TfEvent& a = events[1];
  EXPECT_EQ(a.step, 1);
  EXPECT_EQ(a.wall_time, 1700000000.125);
  EXPECT_TRUE(a.file_version.empty());
  EXPECT_FALSE(a.session_start);
  // NaN is left out; 0.0 must still be present (a oneof field is written even at its default).
  ASSERT_EQ(a.scalars.size(), 4u);
  EXPECT_EQ(a.scalars[0].first, "train/loss");
  EXPECT_EQ(a.scalars[0].second, 0.25f);
  EXPECT_EQ(a.scalars[1].first, "train/reward");
  EXPECT_EQ(a.scalars[1].second, -3.5f);
  EXPECT_EQ(a.scalars[2].first, "lr");
  EXPECT_EQ(a.scalars[2].second, 1e-3f);
  EXPECT_EQ(a.scalars[3].first, "zero");
  EXPECT_EQ(a.scalars[3].second, 0.0f);

  const TfEvent& b = events[2];
  EXPECT_EQ(b.step, std::int64_t{1} << 40);
  EXPECT_NEAR(b.wall_time, now, 5.0);
  ASSERT_EQ(b.scalars.size(), 1u);
  EXPECT_EQ(b.scalars[0].first, "train/loss");
  EXPECT_EQ(b.scalars[0].second, static_cast<float>(123456.789));

  EXPECT_EQ(events[3].step, 7);
  EXPECT_TRUE(events[3].scalars.empty());
}

TEST_F(TfEventsTest, EachWriteIsOnDiskBeforeItReturns) {
  TensorBoardWriter writer(dir());
  writer.write_scalars(3, {{"x", 2.0}});
  // Read while the writer is still open: nothing may wait in a buffer.
  const std::vector<TfEvent> events = read_tfevents(writer.path());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].step, 3);
  ASSERT_EQ(events[1].scalars.size(), 1u);
  EXPECT_EQ(events[1].scalars[0].second, 2.0f);
}

TEST_F(TfEventsTest, ReaderDetectsCorruptionAndTruncation) {
  std::string path;
  {
    TensorBoardWriter writer(dir());
    writer.write_scalars(5, {{"train/loss", 0.5}, {"train/reward", 1.0}});
    path = writer.path();
  }
  const std::string good = read_bytes(path);
  ASSERT_EQ(read_tfevents(path).size(), 2u);
  const std::size_t second = 12 + 24 + 4;  // byte offset of the scalar record
  ASSERT_GT(good.size(), second + 20);

  std::string bad = good;
  bad[second + 12 + 5] ^= 0x01;  // a byte of the Event
  write_bytes(path, bad);
  std::string msg = error_of<std::runtime_error>([&] { read_tfevents(path); });
  EXPECT_NE(msg.find("data CRC mismatch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("offset " + std::to_string(second)), std::string::npos) << msg;

  bad = good;
  bad[second] ^= 0x01;  // the length
  write_bytes(path, bad);
  msg = error_of<std::runtime_error>([&] { read_tfevents(path); });
  EXPECT_NE(msg.find("length CRC mismatch"), std::string::npos) << msg;

  bad = good;
  bad[bad.size() - 1] ^= 0x80;  // the data CRC itself
  write_bytes(path, bad);
  msg = error_of<std::runtime_error>([&] { read_tfevents(path); });
  EXPECT_NE(msg.find("data CRC mismatch"), std::string::npos) << msg;

  write_bytes(path, good.substr(0, good.size() - 3));
  msg = error_of<std::runtime_error>([&] { read_tfevents(path); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST_F(TfEventsTest, ResumedRunWritesSessionStartAfterCheckpointStep) {
  {
    TensorBoardWriter fresh(dir() + "/fresh");
    for (const TfEvent& e : read_tfevents(fresh.path())) EXPECT_FALSE(e.session_start);
  }
  TensorBoardWriter writer(dir() + "/resumed", 41);
  writer.write_scalars(42, {{"train/loss", 0.75}});
  const std::vector<TfEvent> events = read_tfevents(writer.path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_TRUE(events[1].session_start);
  EXPECT_EQ(events[1].step, 42);
  EXPECT_TRUE(events[1].scalars.empty());
  EXPECT_NEAR(events[1].wall_time, TensorBoardWriter::now_seconds(), 5.0);
  EXPECT_EQ(events[2].step, 42);
  ASSERT_EQ(events[2].scalars.size(), 1u);
  EXPECT_EQ(events[2].scalars[0].second, 0.75f);
}

TEST_F(TfEventsTest, ResumeFromStepZero) {
  TensorBoardWriter writer(dir(), 0);
  const std::vector<TfEvent> events = read_tfevents(writer.path());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(events[1].session_start);
  EXPECT_EQ(events[1].step, 1);
}

TEST_F(TfEventsTest, CreatesMissingRunDir) {
  const std::string run_dir = dir() + "/a/b/run";
  TensorBoardWriter writer(run_dir);
  EXPECT_TRUE(fs::is_directory(run_dir));
  EXPECT_EQ(grpo::testing::find_tfevents_file(run_dir), writer.path());
}

TEST_F(TfEventsTest, EveryWriterOpensANewFile) {
  TensorBoardWriter first(dir());
  first.write_scalars(1, {{"x", 1.0}});
  TensorBoardWriter second(dir(), 0);
  EXPECT_NE(first.path(), second.path());
  ASSERT_EQ(read_tfevents(first.path()).size(), 2u);  // not truncated by the second writer
  EXPECT_EQ(read_tfevents(second.path()).size(), 2u);
  // Names sort in the order the files were opened: the order TensorBoard reads them in.
  EXPECT_LT(first.path(), second.path());
  const std::string msg = error_of<std::runtime_error>([&] { grpo::testing::find_tfevents_file(dir()); });
  EXPECT_NE(msg.find("found 2"), std::string::npos) << msg;
}

TEST_F(TfEventsTest, FindTfeventsFileRejectsEmptyDir) {
  const std::string msg = error_of<std::runtime_error>([&] { grpo::testing::find_tfevents_file(dir()); });
  EXPECT_NE(msg.find("found 0"), std::string::npos) << msg;
}

TEST_F(TfEventsTest, RunDirThatIsAFileThrows) {
  const std::string file = dir() + "/not_a_dir";
  write_bytes(file, "x");
  std::string msg = error_of<std::runtime_error>([&] { TensorBoardWriter writer(file); });
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  msg = error_of<std::runtime_error>([&] { TensorBoardWriter writer(file + "/sub"); });
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
}

}  // namespace
