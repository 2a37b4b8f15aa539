// A component that outlives the registry that created it, and is destroyed during static
// destruction after main returns. Run plainly and under valgrind by ctest; any use of
// unmapped plugin code or freed host state crashes or makes valgrind fail the test.
#include <cstdio>
#include <memory>

#include "core/plugin/plugin_registry.h"

namespace {
std::shared_ptr<grpo::sdk::Verifier> g_survivor;  // destroyed after main
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PLUGIN_DIR\n", argv[0]);
    return 2;
  }
  grpo::core::PluginSearchPath sp;
  sp.explicit_dirs = {argv[1]};
  sp.use_environment = false;
  sp.use_install_dir = false;
  std::shared_ptr<grpo::sdk::Verifier> local;
  {
    grpo::core::PluginRegistry registry(sp);
    local = registry.create_verifier("exact_match", nullptr, "verifiers[0]");
    g_survivor = registry.create_verifier("exact_match", nullptr, "verifiers[1]");
  }  // the registry is gone; the objects are not
  grpo::sdk::VerifierInput in;
  in.completion = "  Forty Two ";
  in.ground_truth = "\"forty two\"";
  const double a = local->verify(in).score;
  const double b = g_survivor->verify(in).score;
  local.reset();
  if (a != 1.0 || b != 1.0) {
    std::fprintf(stderr, "unexpected scores %f %f\n", a, b);
    return 1;
  }
  std::puts("component outlived its registry: ok");
  return 0;
}
