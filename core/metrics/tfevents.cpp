#include "core/metrics/tfevents.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>

#include "core/metrics/crc32c.h"

namespace grpo::core {

// The protobuf messages, encoded by hand. Field numbers are those of TensorFlow's
// tensorflow/core/util/event.proto and tensorflow/core/framework/summary.proto:
//   Event      { double wall_time = 1; int64 step = 2;
//                oneof what { string file_version = 3; Summary summary = 5; SessionLog session_log = 7; } }
//   Summary    { repeated Value value = 1; }
//   Value      { string tag = 1; oneof value { float simple_value = 2; } }
//   SessionLog { SessionStatus status = 1 (START = 1); string checkpoint_path = 2; string msg = 3; }
// (Event field 6 is log_message, not session_log.)
namespace {

enum WireType : std::uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

constexpr std::uint32_t kSessionStart = 1;

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, std::uint32_t field, WireType type) { put_varint(out, (field << 3) | type); }

void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_double(std::string& out, std::uint32_t field, double v) {
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed64);
  put_le(out, bits, 8);
}

void put_float(std::string& out, std::uint32_t field, float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed32);
  put_le(out, bits, 4);
}

void put_bytes(std::string& out, std::uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

// wall_time and step, the fields every Event carries. A zero step is left out as proto3 does, so
// the header record is byte-for-byte the one TensorFlow and PyTorch write.
std::string event_head(double wall_time, std::int64_t step) {
  std::string event;
  put_double(event, 1, wall_time);
  if (step != 0) {
    put_key(event, 2, kVarint);
    put_varint(event, static_cast<std::uint64_t>(step));  // int64: negatives as 10-byte two's complement
  }
  return event;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& run_dir, std::int64_t resumed_from_step) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) throw std::runtime_error("cannot create directory '" + run_dir + "': " + ec.message());
  if (!fs::is_directory(run_dir))
    throw std::runtime_error("cannot create directory '" + run_dir + "': " + std::strerror(ENOTDIR));

  // Ten digits keep names in time order when sorted, the order TensorBoard reads a run's files in.
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%010lld", static_cast<long long>(std::time(nullptr)));
  const std::string base = (fs::path(run_dir) / "events.out.tfevents.").string() + stamp + "." + host_name() + "." +
                           std::to_string(::getpid());
  // Never reopen an existing file: a second writer in the same second and process gets ".1", ".2", ...
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    path_ = attempt == 0 ? base : base + "." + std::to_string(attempt);
    fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && (errno != EEXIST || attempt >= 1000))
      throw std::runtime_error("cannot create '" + path_ + "': " + std::strerror(errno));
  }
  file_ = ::fdopen(fd, "wb");
  if (file_ == nullptr) {
    const int err = errno;
    ::close(fd);
    throw std::runtime_error("cannot open '" + path_ + "': " + std::strerror(err));
  }

  // The destructor does not run when a constructor throws.
  try {
    write_opening_records(resumed_from_step);
  } catch (...) {
    std::fclose(file_);
    file_ = nullptr;
    throw;
  }
}

void TensorBoardWriter::write_opening_records(std::int64_t resumed_from_step) {
  const double now = now_seconds();
  std::string header = event_head(now, 0);
  put_bytes(header, 3, "brain.Event:2");
  write_record(header);

  if (resumed_from_step >= 0) {
    // TensorBoard's event accumulator (event_accumulator.py, _CheckForRestartAndMaybePurge), for
    // files of version >= 2, treats a SessionLog START at step S as a restart and purges every point
    // it has read at a step >= S. Reading this file after the killed run's older one, it thus
    // drops what that run logged past the checkpoint, which this run logs again.
    std::string session_log;
    put_key(session_log, 1, kVarint);
    put_varint(session_log, kSessionStart);
    std::string event = event_head(now, resumed_from_step + 1);
    put_bytes(event, 7, session_log);
    write_record(event);
  }
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

double TensorBoardWriter::now_seconds() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration_cast<std::chrono::microseconds>(since_epoch).count() / 1e6;
}

void TensorBoardWriter::write_scalars(std::int64_t step, const std::vector<std::pair<std::string, double>>& scalars,
                                      double wall_time_s) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    if (!std::isfinite(value)) continue;
    std::string v;
    put_bytes(v, 1, tag);
    // Written even when 0.0: simple_value is a oneof member, and an absent one is no scalar at all.
    put_float(v, 2, static_cast<float>(value));
    put_bytes(summary, 1, v);
  }
  std::string event = event_head(wall_time_s, step);
  put_bytes(event, 5, summary);
  write_record(event);
}

void TensorBoardWriter::write_record(const std::string& event) {
  // TFRecord framing: uint64 length, masked CRC of those 8 bytes, data, masked CRC of the data;
  // all little-endian.
  std::string record;
  record.reserve(event.size() + 16);
  put_le(record, event.size(), 8);
  put_le(record, masked_crc32c(record.data(), 8), 4);
  record += event;
  put_le(record, masked_crc32c(event.data(), event.size()), 4);
  errno = 0;
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0)
    throw std::runtime_error("cannot write '" + path_ + "': " + std::strerror(errno ? errno : EIO));
}

}  // namespace grpo::core
