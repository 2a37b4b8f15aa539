// An independent reader of TensorBoard event files, for tests: its own bit-by-bit CRC-32C and its
// own protobuf decoding, so that it shares no code (and no bug) with core/metrics/tfevents.
// Reads the Event fields TensorBoardWriter writes (tensorflow/core/util/event.proto,
// tensorflow/core/framework/summary.proto) and skips any other field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace grpo::testing {

struct TfEvent {
  double wall_time = 0.0;
  std::int64_t step = 0;
  std::string file_version;                             // empty unless a file_version event
  std::vector<std::pair<std::string, float>> scalars;   // Summary values that carry a simple_value
  bool session_start = false;                           // a session_log with status START
};

// CRC-32C computed one bit at a time from the definition (reflected 0x82F63B78, ~0 in and out).
inline std::uint32_t reference_crc32c(const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t crc = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}

inline std::uint32_t reference_masked_crc32c(const void* data, std::size_t n) {
  const std::uint32_t crc = reference_crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

namespace tfevents_detail {

inline std::uint64_t load_le(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Walks the fields of one serialized message.
class Fields {
 public:
  Fields(const unsigned char* data, std::size_t size) : p_(data), end_(data + size) {}

  // Reads the next key; false at the end of the message.
  bool next(std::uint32_t& field, std::uint32_t& wire) {
    if (p_ == end_) return false;
    const std::uint64_t key = varint();
    field = static_cast<std::uint32_t>(key >> 3);
    wire = static_cast<std::uint32_t>(key & 7);
    if (field == 0) throw std::runtime_error("protobuf field number 0");
    return true;
  }

  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) throw std::runtime_error("protobuf varint runs past the message");
      const unsigned char b = *p_++;
      v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return v;
    }
    throw std::runtime_error("protobuf varint longer than 10 bytes");
  }

  std::uint64_t fixed(int bytes) {
    if (end_ - p_ < bytes) throw std::runtime_error("protobuf fixed field runs past the message");
    const std::uint64_t v = load_le(p_, bytes);
    p_ += bytes;
    return v;
  }

  std::pair<const unsigned char*, std::size_t> bytes() {
    const std::uint64_t n = varint();
    if (n > static_cast<std::uint64_t>(end_ - p_)) throw std::runtime_error("protobuf length runs past the message");
    const unsigned char* start = p_;
    p_ += n;
    return {start, static_cast<std::size_t>(n)};
  }

  void skip(std::uint32_t wire) {
    switch (wire) {
      case 0: varint(); break;
      case 1: fixed(8); break;
      case 2: bytes(); break;
      case 5: fixed(4); break;
      default: throw std::runtime_error("unsupported protobuf wire type " + std::to_string(wire));
    }
  }

 private:
  const unsigned char* p_;
  const unsigned char* end_;
};

inline void expect_wire(std::uint32_t field, std::uint32_t wire, std::uint32_t expected) {
  if (wire != expected)
    throw std::runtime_error("field " + std::to_string(field) + " has wire type " + std::to_string(wire) +
                             ", expected " + std::to_string(expected));
}

inline void decode_value(const unsigned char* data, std::size_t size, TfEvent& event) {
  Fields f(data, size);
  std::string tag;
  bool has_value = false;
  float value = 0.0f;
  std::uint32_t field, wire;
  while (f.next(field, wire)) {
    if (field == 1) {  // tag
      expect_wire(field, wire, 2);
      const auto [p, n] = f.bytes();
      tag.assign(reinterpret_cast<const char*>(p), n);
    } else if (field == 2) {  // simple_value
      expect_wire(field, wire, 5);
      const auto bits = static_cast<std::uint32_t>(f.fixed(4));
      std::memcpy(&value, &bits, sizeof value);
      has_value = true;
    } else {
      f.skip(wire);
    }
  }
  if (has_value) event.scalars.emplace_back(tag, value);
}

inline TfEvent decode_event(const unsigned char* data, std::size_t size) {
  TfEvent event;
  Fields f(data, size);
  std::uint32_t field, wire;
  while (f.next(field, wire)) {
    if (field == 1) {  // wall_time
      expect_wire(field, wire, 1);
      const std::uint64_t bits = f.fixed(8);
      std::memcpy(&event.wall_time, &bits, sizeof bits);
    } else if (field == 2) {  // step
      expect_wire(field, wire, 0);
      event.step = static_cast<std::int64_t>(f.varint());
    } else if (field == 3) {  // file_version
      expect_wire(field, wire, 2);
      const auto [p, n] = f.bytes();
      event.file_version.assign(reinterpret_cast<const char*>(p), n);
    } else if (field == 5) {  // summary { repeated Value value = 1; }
      expect_wire(field, wire, 2);
      const auto [p, n] = f.bytes();
      Fields summary(p, n);
      std::uint32_t sfield, swire;
      while (summary.next(sfield, swire)) {
        if (sfield != 1) {
          summary.skip(swire);
          continue;
        }
        expect_wire(sfield, swire, 2);
        const auto [vp, vn] = summary.bytes();
        decode_value(vp, vn, event);
      }
    } else if (field == 7) {  // session_log { SessionStatus status = 1; }
      expect_wire(field, wire, 2);
      const auto [p, n] = f.bytes();
      Fields log(p, n);
      std::uint32_t lfield, lwire;
      while (log.next(lfield, lwire)) {
        if (lfield == 1) {
          expect_wire(lfield, lwire, 0);
          event.session_start = log.varint() == 1;  // START
        } else {
          log.skip(lwire);
        }
      }
    } else {
      f.skip(wire);
    }
  }
  return event;
}

}  // namespace tfevents_detail

// Every event of the file at `path`, in order. Throws std::runtime_error naming the path and the
// byte offset of the record on a truncated record, a CRC mismatch or undecodable protobuf.
inline std::vector<TfEvent> read_tfevents(const std::string& path) {
  using tfevents_detail::load_le;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open '" + path + "'");
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto* data = reinterpret_cast<const unsigned char*>(file.data());
  auto fail = [&](std::size_t offset, const std::string& what) {
    throw std::runtime_error(path + ": record at byte offset " + std::to_string(offset) + ": " + what);
  };

  std::vector<TfEvent> events;
  std::size_t offset = 0;
  while (offset < file.size()) {
    if (file.size() - offset < 12) fail(offset, "truncated length header");
    const std::uint64_t length = load_le(data + offset, 8);
    if (static_cast<std::uint32_t>(load_le(data + offset + 8, 4)) != reference_masked_crc32c(data + offset, 8))
      fail(offset, "length CRC mismatch");
    if (length > file.size() - offset - 12 || file.size() - offset - 12 - length < 4)
      fail(offset, "truncated data (length " + std::to_string(length) + ")");
    const unsigned char* payload = data + offset + 12;
    if (static_cast<std::uint32_t>(load_le(payload + length, 4)) != reference_masked_crc32c(payload, length))
      fail(offset, "data CRC mismatch");
    try {
      events.push_back(tfevents_detail::decode_event(payload, length));
    } catch (const std::runtime_error& e) {
      fail(offset, e.what());
    }
    offset += 12 + length + 4;
  }
  return events;
}

// The one events.out.tfevents.* file in `dir`; throws std::runtime_error when there are none or several.
inline std::string find_tfevents_file(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) found.push_back(entry.path().string());
  if (found.size() != 1)
    throw std::runtime_error("expected one events.out.tfevents.* file in '" + dir + "', found " +
                             std::to_string(found.size()));
  return found.front();
}

}  // namespace grpo::testing
