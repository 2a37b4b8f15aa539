#include "apps/cli/exit_codes.h"

#include "core/data/dataset.h"
#include "core/dist/process_group.h"
#include "core/plugin/plugin_registry.h"
#include "grpo/sdk/config_view.h"

namespace grpo::cli {

const std::vector<ExitCodeInfo>& exit_code_table() {
  static const std::vector<ExitCodeInfo> table = {
      {kExitOk, "ok", "success"},
      {kExitInternal, "internal", "internal error (a bug; please report it with the log)"},
      {kExitUsage, "usage", "bad command line"},
      {kExitConfig, "config", "invalid configuration or data (the message names file, line and key)"},
      {kExitPlugin, "plugin", "plugin error (load, handshake, unknown component, factory failure)"},
      {kExitRuntime, "runtime", "runtime error while running the job"},
      {kExitUnavailable, "unavailable", "the requested job is not part of this build"},
      {kExitPeerLost, "peer-lost", "data-parallel training: another rank died, hung or failed (the message names it)"},
  };
  return table;
}

std::string exit_codes_help(std::initializer_list<ExitCodeUse> codes) {
  std::string out = "\nExit codes:\n";
  for (const ExitCodeUse& use : codes) {
    const char* meaning = use.meaning;
    if (!meaning)
      for (const ExitCodeInfo& row : exit_code_table())
        if (row.code == use.code) meaning = row.meaning;
    out += "  " + std::to_string(static_cast<int>(use.code)) + "  " + (meaning ? meaning : "?") + "\n";
  }
  return out;
}

ExitStatus exit_status_of(std::exception_ptr error) {
  if (!error) return {kExitInternal, "internal error: no exception"};
  try {
    std::rethrow_exception(error);
  } catch (const AppError& e) {
    return {e.exit_code(), e.what()};
  } catch (const core::dist::PeerLostError& e) {
    return {kExitPeerLost, e.what()};
  } catch (const sdk::ConfigError& e) {
    return {kExitConfig, std::string("configuration error: ") + e.what()};
  } catch (const core::PluginError& e) {
    return {kExitPlugin, std::string("plugin error: ") + e.what()};
  } catch (const core::DataError& e) {
    return {kExitConfig, std::string("data error: ") + e.what()};
  } catch (const std::invalid_argument& e) {
    return {kExitUsage, e.what()};
  } catch (const std::exception& e) {
    return {kExitInternal, std::string("internal error: ") + e.what()};
  } catch (...) {
    return {kExitInternal, "internal error: an exception not derived from std::exception"};
  }
}

}  // namespace grpo::cli
