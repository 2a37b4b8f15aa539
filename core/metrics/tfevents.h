// TensorBoard event files without TensorFlow or protobuf: scalars per training step, readable by
// `tensorboard --logdir <run_dir>` exactly like PyTorch's SummaryWriter output.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace grpo::core {

class TensorBoardWriter {
 public:
  // Creates `run_dir` if needed and a new file run_dir/events.out.tfevents.<unix seconds>.<host>.<pid>
  // (a ".N" suffix if that name is taken), whose first record declares file_version "brain.Event:2".
  // resumed_from_step >= 0 (the checkpoint step a resumed run restarts from) also writes a
  // SessionLog START at resumed_from_step + 1, which makes TensorBoard drop the killed run's
  // points at later steps. Throws std::runtime_error naming the path and the OS error.
  explicit TensorBoardWriter(const std::string& run_dir, std::int64_t resumed_from_step = -1);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event at `step` holding a simple_value (float) per scalar; non-finite values are left
  // out (metrics.jsonl writes them as null). Flushed before returning, so a crash loses at most
  // the step in progress. Throws std::runtime_error naming the path on a write error.
  void write_scalars(std::int64_t step, const std::vector<std::pair<std::string, double>>& scalars,
                     double wall_time_s = now_seconds());

  const std::string& path() const { return path_; }

  // Seconds since the Unix epoch, with sub-second precision: an event's wall_time.
  static double now_seconds();

 private:
  // The file_version header and, for a resumed run, the SessionLog START.
  void write_opening_records(std::int64_t resumed_from_step);
  // Appends one TFRecord holding `event` (a serialized Event) and flushes.
  void write_record(const std::string& event);

  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace grpo::core
