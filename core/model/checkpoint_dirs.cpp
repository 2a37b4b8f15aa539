#include "core/model/checkpoint_dirs.h"

#include <algorithm>
#include <cstdio>

namespace grpo::core {

namespace fs = std::filesystem;

std::string checkpoint_root(const std::string& run_dir) { return (fs::path(run_dir) / "checkpoints").string(); }

std::string checkpoint_step_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%06lld", static_cast<long long>(step));
  return buf;
}

std::string checkpoint_path(const std::string& run_dir, std::int64_t step) {
  return (fs::path(checkpoint_root(run_dir)) / checkpoint_step_name(step)).string();
}

std::vector<std::pair<std::int64_t, fs::path>> complete_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<std::int64_t, fs::path>> out;
  const fs::path root = checkpoint_root(run_dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_", 0) != 0 || !entry.is_directory()) continue;
    const std::string digits = name.substr(5);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (!fs::exists(entry.path() / kCheckpointStateFile)) continue;
    out.emplace_back(std::stoll(digits), entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
  auto all = complete_checkpoints(run_dir);
  if (all.empty()) return std::nullopt;
  return all.back().second.string();
}

std::vector<std::string> remove_checkpoint_staging(const std::string& run_dir) {
  std::vector<std::string> removed;
  const fs::path root = checkpoint_root(run_dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return removed;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".step_", 0) != 0) continue;
    fs::remove_all(entry.path());
    removed.push_back(name);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

}  // namespace grpo::core
