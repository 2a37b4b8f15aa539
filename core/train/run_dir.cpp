#include "core/train/run_dir.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>

#include "core/config/config_access.h"
#include "core/config/yaml_loader.h"
#include "core/util/fs.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

namespace fs = std::filesystem;

std::string check_run_output_dir(const sdk::ConfigValue& config) {
  const std::string dir = sdk::ConfigView(find_config_node(config, {"run"}), "run").require_string("output_dir");
  auto fail = [&](const std::string& what) { fail_at_config_key(config, {"run", "output_dir"}, what); };
  if (dir.empty()) fail("expected the run's folder, got an empty path");
  const std::string shown = dir.size() > 80 ? dir.substr(0, 60) + "... (" + std::to_string(dir.size()) + " bytes)" : dir;
  if (dir.size() >= PATH_MAX)
    fail("'" + shown + "' is longer than the system's limit on a path (" + std::to_string(PATH_MAX - 1) + " bytes)");
  // The nearest folder that exists: the folder itself, or where it would be created.
  fs::path existing = fs::absolute(dir);
  std::error_code ec;
  while (!fs::exists(existing, ec) && existing.has_parent_path() && existing != existing.parent_path())
    existing = existing.parent_path();
  const long name_max = ::pathconf(existing.c_str(), _PC_NAME_MAX);
  for (const auto& part : fs::path(dir))
    if (name_max > 0 && static_cast<long>(part.native().size()) > name_max)
      fail("'" + shown + "' has a name of " + std::to_string(part.native().size()) + " bytes; the file system allows " +
           std::to_string(name_max));
  if (!fs::is_directory(existing, ec))
    fail("'" + shown + "' cannot be a folder: " + existing.string() + " is a file");
  if (::access(existing.c_str(), W_OK | X_OK) != 0)
    fail("'" + shown + "': " + existing.string() + " is not writable (" + std::strerror(errno) + ")");
  return dir;
}

void write_effective_config(const std::string& run_dir, const sdk::ConfigValue& config) {
  atomic_write_file((fs::path(run_dir) / kEffectiveConfigFile).string(), to_yaml(config));
}

}  // namespace grpo::core
