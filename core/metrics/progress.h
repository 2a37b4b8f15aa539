// Progress display for long jobs (SFT, GRPO training, evaluation).
//
// On a terminal: one live line, redrawn in place with "\r\x1b[2K", e.g.
//   step 37/120 [######..............] 31% | ETA 2m14s | reward 4.21 | correct 42.2% | 1,830 tok/s
// Elsewhere (CI, pipes, `| tee`): plain lines, at most one per plain_interval_s plus the first and the final one:
//   [progress] step 37/120 (31%) | ETA 2m14s | reward 4.21 | correct 42.2% | 1,830 tok/s
//
// Log lines must not garble the live line: wrap the console sink with make_progress_aware_sink(), which erases
// the active live line before each message and redraws it after. The active line lives in a process-wide
// registry (a stack, so a nested display such as evaluation inside training takes over the line while it runs).
#pragma once

#include <spdlog/sinks/sink.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::core {

namespace detail {
struct LiveLine;  // a display's slot in the process-wide registry of live lines (progress.cpp)
}

// One " | "-separated segment: rendered "name value"; an empty name renders the value alone ("1,830 tok/s").
struct ProgressField {
  std::string name;
  std::string value;
};

// "45s", "2m14s", "1h03m" (rounded to the second below an hour, to the minute above); "?" when negative or
// not finite.
std::string format_duration(double seconds);

// An integer with thousands separators: 1234567 -> "1,234,567".
std::string format_count(std::int64_t n);

// A throughput: below 10 with one decimal ("3.5"), otherwise rounded with thousands separators ("1,830");
// "?" when negative or not finite.
std::string format_rate(double per_second);

// A fraction as a percentage: 0.4219 -> "42.2%" (decimals = 1).
std::string format_percent(double fraction, int decimals = 1);

// Everything the line renderer needs; render_progress_line() is pure so tests can check it exactly.
struct ProgressState {
  std::string label;        // "step", "sample", ...
  std::int64_t done = 0;
  std::int64_t total = 0;   // <= 0: unknown (no bar, no percentage, no ETA)
  double eta_s = -1;        // < 0: unknown (segment omitted)
  double elapsed_s = -1;    // shown as "took X" instead of the ETA once complete or finished
  bool finished = false;
  std::vector<ProgressField> fields;
};

// The line without any control characters or newline. Live lines carry a 20-column bar; plain lines start
// with "[progress]". When live and width > 0 the line is kept under `width` columns (a line that wraps
// cannot be erased with "\r"): trailing segments (fields, then the ETA) are dropped first, then the count and
// bar are cut.
std::string render_progress_line(const ProgressState& state, bool live, int width);

// Columns of the terminal behind `out` (TIOCGWINSZ), else $COLUMNS, else 100.
int terminal_width(std::FILE* out);

enum class ProgressMode { kAuto, kLive, kPlain, kOff };

struct ProgressOptions {
  // kAuto: $GRPO_PROGRESS (plain|live|off) if set, else live when `out` is a terminal (and TERM is not
  // "dumb"), else plain. An explicit mode wins over the environment.
  ProgressMode mode = ProgressMode::kAuto;
  double plain_interval_s = 10.0;
  int width = 0;                 // <= 0: terminal_width(out), queried on every redraw so resizes are followed
  std::function<double()> now;   // seconds on any monotonic scale; empty: steady_clock (tests inject a fake)
};

// The mode a display with `requested` on `out` runs in: kLive, kPlain or kOff.
ProgressMode resolve_progress_mode(ProgressMode requested, std::FILE* out);

// One progress display. A single thread calls update()/finish(); logging from any thread is safe.
//
// The ETA is the average time per unit since the FIRST update, times the units left. Not since construction:
// the time before the first update holds warm-up (model loading, the first unit's allocations and caching)
// that would inflate every later estimate. "took X" on the final line is since construction.
class ProgressDisplay {
 public:
  ProgressDisplay(std::string label, std::int64_t total, std::FILE* out = stdout, ProgressOptions options = {});
  ~ProgressDisplay();
  ProgressDisplay(const ProgressDisplay&) = delete;
  ProgressDisplay& operator=(const ProgressDisplay&) = delete;

  void update(std::int64_t done, const std::vector<ProgressField>& fields = {});

  // Shows the final state ("took X" instead of the ETA) and ends the line; a live line stays on screen.
  // Idempotent; the destructor calls it. Prints nothing when update() was never called.
  void finish();

  ProgressMode mode() const { return mode_; }

 private:
  ProgressState state_at(double now) const;
  double now() const;
  int width() const;

  std::string label_;
  std::int64_t total_;
  std::FILE* out_;
  ProgressOptions options_;
  ProgressMode mode_;
  double created_at_;
  bool started_ = false;
  bool finished_ = false;
  bool pending_ = false;  // plain mode: the latest update was rate-limited away
  double first_at_ = 0;
  std::int64_t first_done_ = 0;
  double last_at_ = 0;
  double last_print_at_ = 0;
  std::int64_t done_ = 0;
  std::vector<ProgressField> fields_;
  std::unique_ptr<detail::LiveLine> line_;
};

// Writes `text` to `stream` with the active live line (if any) erased before and redrawn after; for output that
// bypasses spdlog (e.g. an evaluation table printed to stdout) while a display is live.
void print_above_progress(std::FILE* stream, std::string_view text);

// A sink that forwards to `inner`, erasing the active live line before each message and redrawing it after.
// Pattern, formatter and flush go to `inner`; the wrapper's own level filters as any sink's does.
std::shared_ptr<spdlog::sinks::sink> make_progress_aware_sink(std::shared_ptr<spdlog::sinks::sink> inner);

}  // namespace grpo::core
