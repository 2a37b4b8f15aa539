// Progress display: formatting helpers, the pure line renderer, plain-mode rate limiting and live-mode redraws
// with a fake clock, GRPO_PROGRESS, and the spdlog wrapper that keeps log lines from garbling the live line.
#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/metrics/progress.h"

namespace {

using namespace grpo::core;

const std::string kErase = "\r\x1b[2K";

// A FILE* whose contents can be read back; a tmpfile is never a terminal.
class Capture {
 public:
  Capture() : f_(std::tmpfile()) {}
  ~Capture() { std::fclose(f_); }
  std::FILE* file() const { return f_; }
  std::string text() const {
    std::fflush(f_);
    const long end = std::ftell(f_);
    std::string out(static_cast<std::size_t>(end), '\0');
    std::rewind(f_);
    const std::size_t n = std::fread(out.data(), 1, out.size(), f_);
    out.resize(n);
    std::fseek(f_, 0, SEEK_END);
    return out;
  }

 private:
  std::FILE* f_;
};

// Sets an environment variable for one test and restores the previous value.
class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~EnvGuard() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

ProgressOptions fake_clock(ProgressMode mode, const double* t, int width = 200) {
  ProgressOptions o;
  o.mode = mode;
  o.width = width;
  o.now = [t] { return *t; };
  return o;
}

// An spdlog sink that writes into a FILE*, so that its output and the live line share one ordered stream.
class FileSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit FileSink(std::FILE* f) : f_(f) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    std::fwrite(buf.data(), 1, buf.size(), f_);
  }
  void flush_() override { std::fflush(f_); }

 private:
  std::FILE* f_;
};

std::shared_ptr<spdlog::logger> logger_into(std::FILE* f) {
  auto sink = make_progress_aware_sink(std::make_shared<FileSink>(f));
  auto logger = std::make_shared<spdlog::logger>("progress_test", sink);
  logger->set_pattern("%v");
  return logger;
}

TEST(ProgressFormat, Duration) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(45), "45s");
  EXPECT_EQ(format_duration(59.4), "59s");
  EXPECT_EQ(format_duration(59.6), "1m00s");
  EXPECT_EQ(format_duration(134), "2m14s");
  EXPECT_EQ(format_duration(90), "1m30s");
  EXPECT_EQ(format_duration(3599.4), "59m59s");
  EXPECT_EQ(format_duration(3599.6), "1h00m");
  EXPECT_EQ(format_duration(3780), "1h03m");
  EXPECT_EQ(format_duration(25 * 3600 + 7 * 60 + 20), "25h07m");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(std::nan("")), "?");
  EXPECT_EQ(format_duration(std::numeric_limits<double>::infinity()), "?");
}

TEST(ProgressFormat, CountAndRate) {
  EXPECT_EQ(format_count(0), "0");
  EXPECT_EQ(format_count(999), "999");
  EXPECT_EQ(format_count(1000), "1,000");
  EXPECT_EQ(format_count(1234567), "1,234,567");
  EXPECT_EQ(format_count(-1234567), "-1,234,567");
  EXPECT_EQ(format_count(std::numeric_limits<std::int64_t>::min()), "-9,223,372,036,854,775,808");
  EXPECT_EQ(format_rate(1830.4), "1,830");
  EXPECT_EQ(format_rate(999.5), "1,000");
  EXPECT_EQ(format_rate(123456.7), "123,457");
  EXPECT_EQ(format_rate(100), "100");
  EXPECT_EQ(format_rate(3.46), "3.5");
  EXPECT_EQ(format_rate(0), "0.0");
  EXPECT_EQ(format_rate(-2), "?");
  EXPECT_EQ(format_rate(std::nan("")), "?");
  EXPECT_EQ(format_percent(0.4219), "42.2%");
  EXPECT_EQ(format_percent(0.5, 0), "50%");
  EXPECT_EQ(format_percent(1.0, 2), "100.00%");
}

ProgressState example_state(std::int64_t done, std::int64_t total, double eta_s) {
  ProgressState s;
  s.label = "step";
  s.done = done;
  s.total = total;
  s.eta_s = eta_s;
  s.elapsed_s = 1000;
  s.fields = {{"reward", "4.21"}, {"correct", format_percent(0.4219)}, {"", format_rate(1830.4) + " tok/s"}};
  return s;
}

TEST(ProgressRender, LiveAndPlainExact) {
  EXPECT_EQ(render_progress_line(example_state(10, 40, 90), true, 0),
            "step 10/40 [#####...............] 25% | ETA 1m30s | reward 4.21 | correct 42.2% | 1,830 tok/s");
  EXPECT_EQ(render_progress_line(example_state(37, 120, 134), false, 0),
            "[progress] step 37/120 (31%) | ETA 2m14s | reward 4.21 | correct 42.2% | 1,830 tok/s");
  // Plain lines are never truncated: they do not need erasing.
  EXPECT_EQ(render_progress_line(example_state(37, 120, 134), false, 20),
            "[progress] step 37/120 (31%) | ETA 2m14s | reward 4.21 | correct 42.2% | 1,830 tok/s");
}

TEST(ProgressRender, PercentBarTimingAndUnknownTotal) {
  ProgressState s;
  s.label = "sample";
  s.done = 999;
  s.total = 1000;
  s.eta_s = 0.4;
  // 99.9% rounds to 100 but the work is not done yet.
  EXPECT_EQ(render_progress_line(s, true, 0), "sample 999/1000 [###################.] 99% | ETA 0s");
  s.done = 1000;
  s.elapsed_s = 242;
  EXPECT_EQ(render_progress_line(s, true, 0), "sample 1000/1000 [####################] 100% | took 4m02s");
  s.done = 500;
  s.finished = true;  // stopped early: the final line reports the time taken, not an ETA
  EXPECT_EQ(render_progress_line(s, false, 0), "[progress] sample 500/1000 (50%) | took 4m02s");
  ProgressState open;
  open.label = "batch";
  open.done = 37;
  open.fields = {{"loss", "0.12"}, {"", ""}};
  EXPECT_EQ(render_progress_line(open, true, 0), "batch 37 | loss 0.12");
}

TEST(ProgressRender, TruncatesLiveLineBelowWidth) {
  const ProgressState s = example_state(10, 40, 90);
  // Head and ETA are 49 columns; with " | reward 4.21" 63. The line must stay strictly below the width.
  EXPECT_EQ(render_progress_line(s, true, 64), "step 10/40 [#####...............] 25% | ETA 1m30s | reward 4.21");
  EXPECT_EQ(render_progress_line(s, true, 63), "step 10/40 [#####...............] 25% | ETA 1m30s");
  EXPECT_EQ(render_progress_line(s, true, 50), "step 10/40 [#####...............] 25% | ETA 1m30s");
  EXPECT_EQ(render_progress_line(s, true, 49), "step 10/40 [#####...............] 25%");  // ETA dropped whole
  EXPECT_EQ(render_progress_line(s, true, 20), "step 10/40 [#####..");
  ProgressState accented;
  accented.label = "\xC3\xA9tape";  // "étape": the cut counts code points and never splits one
  accented.done = 3;
  EXPECT_EQ(render_progress_line(accented, true, 4), "\xC3\xA9ta");
  for (int width = 2; width < 120; ++width) {
    EXPECT_LT(render_progress_line(s, true, width).size(), static_cast<std::size_t>(width)) << width;
  }
}

TEST(ProgressDisplayPlain, RateLimitedToIntervalPlusFirstAndFinal) {
  Capture cap;
  double t = 0;
  {
    ProgressOptions o = fake_clock(ProgressMode::kPlain, &t);
    o.plain_interval_s = 10;
    ProgressDisplay p("step", 100, cap.file(), o);
    EXPECT_EQ(p.mode(), ProgressMode::kPlain);
    for (int i = 0; i <= 25; ++i) {
      t = i;
      p.update(i);
    }
    p.finish();
    p.finish();  // idempotent
  }
  EXPECT_EQ(cap.text(),
            "[progress] step 0/100 (0%)\n"
            "[progress] step 10/100 (10%) | ETA 1m30s\n"
            "[progress] step 20/100 (20%) | ETA 1m20s\n"
            "[progress] step 25/100 (25%) | took 25s\n");
}

TEST(ProgressDisplayPlain, CompletionPrintsAtOnceAndIsNotRepeated) {
  Capture cap;
  double t = 0;
  {
    ProgressDisplay p("step", 10, cap.file(), fake_clock(ProgressMode::kPlain, &t));
    p.update(0);
    t = 1;
    p.update(5, {{"reward", "0.50"}});
    t = 2;
    p.update(10, {{"reward", "0.75"}});
    t = 3;
  }  // the destructor finishes; the completed state was already printed
  EXPECT_EQ(cap.text(),
            "[progress] step 0/10 (0%)\n"
            "[progress] step 10/10 (100%) | took 2s | reward 0.75\n");
}

TEST(ProgressDisplayLive, RedrawsInPlaceAndEndsLineOnFinish) {
  Capture cap;
  double t = 0;
  ProgressDisplay p("step", 4, cap.file(), fake_clock(ProgressMode::kLive, &t));
  p.update(0);
  t = 1;
  p.update(1);
  t = 2;
  p.update(2);
  const std::string before = cap.text();
  EXPECT_EQ(before.find('\n'), std::string::npos);
  EXPECT_EQ(before, kErase + "step 0/4 [....................] 0%" + kErase +
                        "step 1/4 [#####...............] 25% | ETA 3s" + kErase +
                        "step 2/4 [##########..........] 50% | ETA 2s");
  t = 3;
  p.finish();
  EXPECT_EQ(cap.text(), before + kErase + "step 2/4 [##########..........] 50% | took 3s\n");
  p.update(3);  // ignored after finish
  EXPECT_EQ(cap.text(), before + kErase + "step 2/4 [##########..........] 50% | took 3s\n");
}

TEST(ProgressDisplayLive, EtaCountsFromFirstUpdateNotConstruction) {
  Capture cap;
  double t = 0;
  ProgressDisplay p("step", 40, cap.file(), fake_clock(ProgressMode::kLive, &t));
  t = 100;  // warm-up (model loading) before the first update must not inflate the ETA
  p.update(0);
  t = 130;
  p.update(10);
  const std::string text = cap.text();
  EXPECT_EQ(text.substr(text.rfind(kErase)), kErase + "step 10/40 [#####...............] 25% | ETA 1m30s");
  t = 140;
  p.finish();
  EXPECT_NE(cap.text().find("| took 2m20s\n"), std::string::npos);  // "took" is since construction
}

TEST(ProgressDisplayLive, TruncatesToConfiguredWidth) {
  Capture cap;
  double t = 0;
  ProgressDisplay p("step", 40, cap.file(), fake_clock(ProgressMode::kLive, &t, 40));
  p.update(0, {{"reward", "4.21"}});
  t = 30;
  p.update(10, {{"reward", "4.21"}});
  // The ETA and the reward do not fit in 39 columns; the count and bar do.
  EXPECT_EQ(cap.text(),
            kErase + "step 0/40 [....................] 0%" + kErase + "step 10/40 [#####...............] 25%");
}

TEST(ProgressMode, EnvironmentAndDetection) {
  Capture cap;
  {
    EnvGuard env("GRPO_PROGRESS", nullptr);
    EXPECT_EQ(resolve_progress_mode(ProgressMode::kAuto, cap.file()), ProgressMode::kPlain);  // not a terminal
  }
  {
    EnvGuard env("GRPO_PROGRESS", "live");
    EXPECT_EQ(resolve_progress_mode(ProgressMode::kAuto, cap.file()), ProgressMode::kLive);
    EXPECT_EQ(resolve_progress_mode(ProgressMode::kPlain, cap.file()), ProgressMode::kPlain);  // explicit wins
  }
  {
    EnvGuard env("GRPO_PROGRESS", "plain");
    EXPECT_EQ(resolve_progress_mode(ProgressMode::kAuto, cap.file()), ProgressMode::kPlain);
  }
  EXPECT_EQ(resolve_progress_mode(ProgressMode::kLive, nullptr), ProgressMode::kOff);
}

TEST(ProgressMode, OffPrintsNothing) {
  EnvGuard env("GRPO_PROGRESS", "off");
  Capture cap;
  double t = 0;
  {
    ProgressDisplay p("step", 3, cap.file(), fake_clock(ProgressMode::kAuto, &t));
    EXPECT_EQ(p.mode(), ProgressMode::kOff);
    for (int i = 0; i <= 3; ++i) {
      t = i * 20;
      p.update(i, {{"reward", "1.0"}});
    }
    p.finish();
  }
  EXPECT_EQ(cap.text(), "");
}

TEST(ProgressSink, LogMessageErasesThenRedrawsLiveLine) {
  Capture cap;
  auto logger = logger_into(cap.file());
  logger->info("before");  // no live line yet: passed through untouched
  double t = 0;
  const std::string line = "step 0/4 [....................] 0%";
  {
    ProgressDisplay p("step", 4, cap.file(), fake_clock(ProgressMode::kLive, &t));
    p.update(0);
    logger->info("hello {}", 42);
    logger->warn("second");
    EXPECT_EQ(cap.text(), "before\n" + kErase + line + kErase + "hello 42\n" + line + kErase + "second\n" + line);
  }
  const std::string finished = cap.text();
  logger->info("after");  // the line was finished: no erase, no redraw
  EXPECT_EQ(cap.text(), finished + "after\n");
  EXPECT_EQ(finished.substr(finished.size() - 1), "\n");
}

TEST(ProgressSink, LevelFilterAndPrintAbove) {
  Capture cap;
  auto logger = logger_into(cap.file());
  logger->sinks()[0]->set_level(spdlog::level::warn);
  double t = 0;
  ProgressDisplay p("step", 4, cap.file(), fake_clock(ProgressMode::kLive, &t));
  p.update(0);
  const std::string line = "step 0/4 [....................] 0%";
  logger->info("filtered");  // below the wrapper's level: the live line is left alone
  EXPECT_EQ(cap.text(), kErase + line);
  print_above_progress(cap.file(), "table\n");
  EXPECT_EQ(cap.text(), kErase + line + kErase + "table\n" + line);
  p.finish();
}

TEST(ProgressSink, NestedDisplayTakesOverAndHandsBack) {
  Capture cap;
  double t = 0;
  ProgressDisplay outer("step", 4, cap.file(), fake_clock(ProgressMode::kLive, &t));
  outer.update(0);
  const std::string outer_line = "step 0/4 [....................] 0%";
  {
    ProgressDisplay inner("sample", 2, cap.file(), fake_clock(ProgressMode::kLive, &t));
    inner.update(0);
    t = 1;
    inner.update(2);
    outer.update(0);  // not on screen while the inner display runs: recorded only
    t = 2;
  }
  auto logger = logger_into(cap.file());
  logger->info("msg");
  EXPECT_EQ(cap.text(), kErase + outer_line +                                              // outer drawn
                            kErase + kErase + "sample 0/2 [....................] 0%" +     // inner takes over
                            kErase + "sample 2/2 [####################] 100% | took 1s" +  // inner complete
                            kErase + "sample 2/2 [####################] 100% | took 2s\n" + outer_line +
                            kErase + "msg\n" + outer_line);
  outer.finish();
}

}  // namespace
