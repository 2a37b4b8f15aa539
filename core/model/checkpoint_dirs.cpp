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
  // A save interrupted inside replace_directory's fallback (no RENAME_EXCHANGE) may have left
  // step_N only as the complete new folder (.step_N.partial, its trainer_state.json written) or
  // as the previous one moved aside (.step_N.partial.old): put the newest complete one back.
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    const std::string suffix = ".partial.old";
    if (name.rfind(".step_", 0) != 0 || name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string step_name = name.substr(1, name.size() - suffix.size() - 1);  // step_000010
    const fs::path target = root / step_name;
    if (fs::exists(target, ec)) continue;
    const fs::path newer = root / ("." + step_name + ".partial");
    fs::rename(fs::exists(newer / kCheckpointStateFile, ec) ? newer : entry.path(), target, ec);
  }
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
