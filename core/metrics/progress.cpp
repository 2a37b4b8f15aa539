#include "core/metrics/progress.h"

#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>

namespace grpo::core {

namespace detail {
struct LiveLine {
  std::FILE* out = nullptr;
  std::string text;    // the latest rendering, redrawn after anything printed above it
  bool shown = false;  // has been drawn at least once, so it occupies the line while registered
};
}  // namespace detail

namespace {

using detail::LiveLine;

constexpr const char* kErase = "\r\x1b[2K";
constexpr int kBarWidth = 20;

// The live lines of the process, innermost (the one on screen) last. Leaked on purpose: messages may be logged
// during static destruction, after a function-local static registry would be gone.
struct Registry {
  std::mutex mu;
  std::vector<LiveLine*> stack;
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

void put(std::FILE* f, std::string_view text) {
  // Best effort: a display that cannot write (closed pipe, full disk) must not stop the job.
  if (!text.empty()) (void)std::fwrite(text.data(), 1, text.size(), f);
  std::fflush(f);
}

LiveLine* top_locked(Registry& r) { return r.stack.empty() ? nullptr : r.stack.back(); }

void erase_top_locked(Registry& r) {
  LiveLine* top = top_locked(r);
  if (top && top->shown) put(top->out, kErase);
}

// After an erase the cursor is at column 0 of an empty line (the text printed above ended with a newline).
void redraw_top_locked(Registry& r) {
  LiveLine* top = top_locked(r);
  if (top && top->shown) put(top->out, top->text);
}

void remove_locked(Registry& r, LiveLine* line) {
  r.stack.erase(std::remove(r.stack.begin(), r.stack.end(), line), r.stack.end());
}

void show_line(LiveLine* line, std::string text) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  line->text = std::move(text);
  line->shown = true;
  if (std::find(r.stack.begin(), r.stack.end(), line) == r.stack.end()) {
    erase_top_locked(r);  // a nested display takes over the line until it finishes
    r.stack.push_back(line);
  }
  // A display below a nested one only records its text; it is redrawn when the nested one finishes.
  if (top_locked(r) == line) put(line->out, kErase + line->text);
}

void finish_line(LiveLine* line, const std::string& text) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  erase_top_locked(r);
  put(line->out, text + "\n");
  remove_locked(r, line);
  redraw_top_locked(r);
}

void forget_line(LiveLine* line) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  remove_locked(r, line);
}

// Display columns, counting each UTF-8 code point as one.
std::size_t columns(std::string_view s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The longest prefix of `s` of at most `max_cols` columns, never splitting a code point.
std::string cut_columns(const std::string& s, std::size_t max_cols) {
  std::size_t cols = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) continue;
    if (cols == max_cols) return s.substr(0, i);
    ++cols;
  }
  return s;
}

std::string percent_text(std::int64_t done, std::int64_t total) {
  std::int64_t pct;
  if (done >= total) {
    pct = static_cast<std::int64_t>(100.0 * static_cast<double>(done) / static_cast<double>(total));
  } else {
    // Rounded, but never "100%" before the work is done.
    pct = std::min<std::int64_t>(99, std::llround(100.0 * static_cast<double>(std::max<std::int64_t>(done, 0)) /
                                                  static_cast<double>(total)));
  }
  return std::to_string(pct) + "%";
}

std::string bar_text(std::int64_t done, std::int64_t total) {
  const double frac = static_cast<double>(std::clamp<std::int64_t>(done, 0, total)) / static_cast<double>(total);
  const int filled = std::clamp(static_cast<int>(frac * kBarWidth), 0, kBarWidth);
  return "[" + std::string(filled, '#') + std::string(kBarWidth - filled, '.') + "]";
}

}  // namespace

std::string format_duration(double seconds) {
  // Beyond ~30k years an ETA is noise (and llround would overflow).
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e12) return "?";
  char buf[48];
  const long long s = std::llround(seconds);
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%llds", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  } else {
    const long long m = std::llround(seconds / 60.0);
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", m / 60, m % 60);
  }
  return buf;
}

std::string format_count(std::int64_t n) {
  // Unsigned magnitude so INT64_MIN has a positive counterpart.
  const std::uint64_t mag = n < 0 ? 0 - static_cast<std::uint64_t>(n) : static_cast<std::uint64_t>(n);
  const std::string digits = std::to_string(mag);
  std::string out = n < 0 ? "-" : "";
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string format_rate(double per_second) {
  if (!std::isfinite(per_second) || per_second < 0 || per_second > 9e18) return "?";
  if (std::llround(per_second * 10) < 100) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.1f", per_second);
    return buf;
  }
  return format_count(std::llround(per_second));
}

std::string format_percent(double fraction, int decimals) {
  if (!std::isfinite(fraction)) return "?";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f%%", std::clamp(decimals, 0, 6), fraction * 100.0);
  return buf;
}

std::string render_progress_line(const ProgressState& state, bool live, int width) {
  std::string head = live ? "" : "[progress] ";
  if (!state.label.empty()) head += state.label + " ";
  head += std::to_string(state.done);
  if (state.total > 0) {
    head += "/" + std::to_string(state.total);
    head += live ? " " + bar_text(state.done, state.total) + " " + percent_text(state.done, state.total)
                 : " (" + percent_text(state.done, state.total) + ")";
  }
  std::vector<std::string> segments;
  const bool complete = state.finished || (state.total > 0 && state.done >= state.total);
  if (complete && state.elapsed_s >= 0) {
    segments.push_back("took " + format_duration(state.elapsed_s));
  } else if (!complete && state.eta_s >= 0) {
    segments.push_back("ETA " + format_duration(state.eta_s));
  }
  for (const auto& f : state.fields) {
    if (f.name.empty() && f.value.empty()) continue;
    segments.push_back(f.name.empty() ? f.value : f.value.empty() ? f.name : f.name + " " + f.value);
  }

  std::string line = head;
  if (!live || width <= 0) {
    for (const auto& seg : segments) line += " | " + seg;
    return line;
  }
  // Stay strictly below the width: some terminals wrap when the last column is written.
  const std::size_t max_cols = static_cast<std::size_t>(std::max(width - 1, 1));
  if (columns(line) > max_cols) return cut_columns(line, max_cols);
  for (const auto& seg : segments) {
    std::string next = line + " | " + seg;
    if (columns(next) > max_cols) break;  // drop this and every later segment, keeping the order stable
    line = std::move(next);
  }
  return line;
}

int terminal_width(std::FILE* out) {
  struct winsize ws {};
  if (out && ::ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* cols = std::getenv("COLUMNS")) {
    const long n = std::strtol(cols, nullptr, 10);
    if (n > 0 && n < 100000) return static_cast<int>(n);
  }
  return 100;
}

ProgressMode resolve_progress_mode(ProgressMode requested, std::FILE* out) {
  if (!out) return ProgressMode::kOff;
  if (requested != ProgressMode::kAuto) return requested;
  if (const char* env = std::getenv("GRPO_PROGRESS"); env && *env) {
    const std::string v = env;
    if (v == "plain") return ProgressMode::kPlain;
    if (v == "live") return ProgressMode::kLive;
    if (v == "off") return ProgressMode::kOff;
    if (v != "auto") spdlog::warn("GRPO_PROGRESS='{}' is not plain, live, off or auto; ignoring it", v);
  }
  const char* term = std::getenv("TERM");
  // A dumb terminal does not understand the erase-line escape.
  const bool dumb = term && std::strcmp(term, "dumb") == 0;
  return ::isatty(fileno(out)) && !dumb ? ProgressMode::kLive : ProgressMode::kPlain;
}

ProgressDisplay::ProgressDisplay(std::string label, std::int64_t total, std::FILE* out, ProgressOptions options)
    : label_(std::move(label)),
      total_(total),
      out_(out),
      options_(std::move(options)),
      mode_(resolve_progress_mode(options_.mode, out)),
      created_at_(now()),
      line_(std::make_unique<detail::LiveLine>()) {
  line_->out = out_;
}

ProgressDisplay::~ProgressDisplay() {
  try {
    finish();
  } catch (...) {
    // A destructor must not throw; losing the last progress line is acceptable.
  }
  // Never leave a dangling pointer in the registry, even if finish() failed half-way.
  forget_line(line_.get());
}

double ProgressDisplay::now() const {
  if (options_.now) return options_.now();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int ProgressDisplay::width() const { return options_.width > 0 ? options_.width : terminal_width(out_); }

ProgressState ProgressDisplay::state_at(double t) const {
  ProgressState s;
  s.label = label_;
  s.done = done_;
  s.total = total_;
  s.elapsed_s = t - created_at_;
  s.fields = fields_;
  const std::int64_t units = done_ - first_done_;
  const double spent = t - first_at_;
  if (total_ > 0 && done_ < total_ && units > 0 && spent > 0) {
    s.eta_s = spent / static_cast<double>(units) * static_cast<double>(total_ - done_);
  }
  return s;
}

void ProgressDisplay::update(std::int64_t done, const std::vector<ProgressField>& fields) {
  if (mode_ == ProgressMode::kOff || finished_) return;
  const double t = now();
  const bool first = !started_;
  if (first) {
    started_ = true;
    first_at_ = t;
    first_done_ = done;
  }
  done_ = done;
  fields_ = fields;
  const ProgressState state = state_at(t);
  if (mode_ == ProgressMode::kLive) {
    show_line(line_.get(), render_progress_line(state, true, width()));
    return;
  }
  const bool complete = total_ > 0 && done >= total_;
  if (first || complete || t - last_print_at_ >= options_.plain_interval_s) {
    print_above_progress(out_, render_progress_line(state, false, 0) + "\n");
    last_print_at_ = t;
    pending_ = false;
  } else {
    pending_ = true;
  }
}

void ProgressDisplay::finish() {
  if (finished_) return;
  finished_ = true;
  if (mode_ == ProgressMode::kOff || !started_) return;
  ProgressState state = state_at(now());
  state.finished = true;
  if (mode_ == ProgressMode::kLive) {
    finish_line(line_.get(), render_progress_line(state, true, width()));
  } else if (pending_) {
    print_above_progress(out_, render_progress_line(state, false, 0) + "\n");
    pending_ = false;
  }
}

void print_above_progress(std::FILE* stream, std::string_view text) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  erase_top_locked(r);
  put(stream, text);
  redraw_top_locked(r);
}

namespace {

class ProgressAwareSink final : public spdlog::sinks::sink {
 public:
  explicit ProgressAwareSink(std::shared_ptr<spdlog::sinks::sink> inner) : inner_(std::move(inner)) {}

  void log(const spdlog::details::log_msg& msg) override {
    // The registry lock orders erase, message and redraw against concurrent redraws from update().
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    LiveLine* top = top_locked(r);
    const bool live = top && top->shown;
    if (live) put(top->out, kErase);
    inner_->log(msg);
    if (live) {
      inner_->flush();  // the message must reach the terminal before the line is redrawn under it
      put(top->out, top->text);
    }
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    inner_->set_formatter(std::move(formatter));
  }

 private:
  std::shared_ptr<spdlog::sinks::sink> inner_;
};

}  // namespace

std::shared_ptr<spdlog::sinks::sink> make_progress_aware_sink(std::shared_ptr<spdlog::sinks::sink> inner) {
  return std::make_shared<ProgressAwareSink>(std::move(inner));
}

}  // namespace grpo::core
