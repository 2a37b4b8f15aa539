// grpo_bench_tool_call: one call of a tool plugin, as a rollout makes it, from the command line;
// prints the observation and its details. For measuring what a tool call costs the host
// (bench/sandbox/flood_memory.sh runs it under /usr/bin/time -v).
//
//   grpo_bench_tool_call TOOL CODE_FILE [KEY=VALUE]...
//
// TOOL is a tool's name (python); the call's arguments are {"code": <CODE_FILE's text>}; each
// KEY=VALUE is an option of the tool's entry (stateful=true, timeout_s=20). Plugins are found as
// grpo-run finds them: $GRPO_PLUGIN_PATH, then the build's or the install's plugin folder.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/plugin/plugin_registry.h"
#include "grpo/sdk/config_value.h"
#include "grpo/sdk/tool.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: grpo_bench_tool_call TOOL CODE_FILE [KEY=VALUE]...\n");
    return 2;
  }
  std::ifstream in(argv[2]);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", argv[2]);
    return 2;
  }
  std::stringstream code;
  code << in.rdbuf();
  grpo::sdk::ConfigValue node = grpo::sdk::ConfigValue::make_map();
  for (int i = 3; i < argc; ++i) {
    const std::string kv = argv[i];
    const std::size_t eq = kv.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "expected KEY=VALUE, got %s\n", argv[i]);
      return 2;
    }
    node.set(kv.substr(0, eq), grpo::sdk::ConfigValue::make_scalar(kv.substr(eq + 1), {}, false), {});
  }
  try {
    grpo::core::PluginRegistry registry;
    const auto tool = registry.create<grpo::sdk::Tool>(argv[1], &node, "tools[0]",
                                                       grpo::core::PluginRegistry::tool_host_keys());
    grpo::sdk::ToolCallContext context;
    context.trajectory_id = "bench";
    context.metadata = "{}";
    const grpo::sdk::ToolObservation obs = tool->call(nlohmann::json{{"code", code.str()}}.dump(), context);
    tool->end_trajectory("bench");
    std::cout << "is_error: " << (obs.is_error ? "true" : "false") << "\ntext: " << obs.text.substr(0, 2000)
              << "\ndetails: " << obs.details << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "grpo_bench_tool_call: %s\n", e.what());
    return 1;
  }
  return 0;
}
