#include "core/runtime/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <stdexcept>

#include "core/metrics/progress.h"

namespace grpo::core {

namespace {
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
    logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
    spdlog::set_default_logger(logger);
  }
  logger->set_level(lvl);
  for (auto& sink : logger->sinks()) sink->set_level(lvl);
  logger->flush_on(spdlog::level::warn);
}

void set_log_rank(int rank) {
  auto logger = spdlog::default_logger();
  const std::string tag = "[rank " + std::to_string(rank) + "] ";
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] " + tag + "[%^%l%$] %v");
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
    sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] [thread %t] %v");
    logger->sinks().push_back(sink);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot open log file '" + path + "': " + e.what());
  }
}

}  // namespace grpo::core
