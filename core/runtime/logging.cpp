#include "core/runtime/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string_view>

#include "core/metrics/progress.h"
#include "core/util/strings.h"
#include "grpo/sdk/utf8.h"

namespace grpo::core {

namespace {

// Untrusted text reaches log lines: configuration values, data rows, model output, plugin messages.
// Raw invalid UTF-8 would make run.log undecodable for the tools that read it; every sink formats
// through this, so each message is escaped once, here (escape_invalid_utf8: the bad bytes become \xNN).
class Utf8SafeFormatter final : public spdlog::formatter {
 public:
  explicit Utf8SafeFormatter(std::string pattern)
      : pattern_(std::move(pattern)), inner_(std::make_unique<spdlog::pattern_formatter>(pattern_)) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    if (sdk::first_invalid_utf8(payload) == std::string_view::npos) {
      inner_->format(msg, dest);
      return;
    }
    const std::string escaped = escape_invalid_utf8(payload);
    spdlog::details::log_msg copy = msg;
    copy.payload = spdlog::string_view_t(escaped.data(), escaped.size());
    inner_->format(copy, dest);
    // The colour sink reads the level's colour range from the message it passed in.
    msg.color_range_start = copy.color_range_start;
    msg.color_range_end = copy.color_range_end;
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<Utf8SafeFormatter>(pattern_); }

 private:
  std::string pattern_;
  std::unique_ptr<spdlog::pattern_formatter> inner_;
};

spdlog::level::level_enum parse_level(const std::string& level) {
  if (level == "trace") return spdlog::level::trace;
  if (level == "debug") return spdlog::level::debug;
  if (level == "info") return spdlog::level::info;
  if (level == "warn") return spdlog::level::warn;
  if (level == "error") return spdlog::level::err;
  throw std::invalid_argument("unknown log level '" + level + "' (expected trace, debug, info, warn or error)");
}
}  // namespace

void init_console_logging(const std::string& level) {
  const auto lvl = parse_level(level);
  auto logger = spdlog::get("grpo");
  if (!logger) {
    auto console = make_progress_aware_sink(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    logger = std::make_shared<spdlog::logger>("grpo", console);
    logger->set_formatter(std::make_unique<Utf8SafeFormatter>("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v"));
    spdlog::set_default_logger(logger);
  }
  logger->set_level(lvl);
  for (auto& sink : logger->sinks()) sink->set_level(lvl);
  logger->flush_on(spdlog::level::warn);
}

void set_log_rank(int rank) {
  auto logger = spdlog::default_logger();
  const std::string tag = "[rank " + std::to_string(rank) + "] ";
  logger->set_formatter(std::make_unique<Utf8SafeFormatter>("[%Y-%m-%d %H:%M:%S.%e] " + tag + "[%^%l%$] %v"));
  if (rank != 0 && logger->level() > spdlog::level::debug) {
    logger->set_level(spdlog::level::warn);
    for (auto& sink : logger->sinks()) sink->set_level(spdlog::level::warn);
  }
}

void add_log_file(const std::string& path) {
  auto logger = spdlog::default_logger();
  try {
    std::filesystem::path p(path);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
    auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
    sink->set_level(logger->level());
    sink->set_formatter(std::make_unique<Utf8SafeFormatter>("[%Y-%m-%d %H:%M:%S.%e] [%l] [thread %t] %v"));
    logger->sinks().push_back(sink);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot open log file '" + path + "': " + e.what());
  }
}

}  // namespace grpo::core
