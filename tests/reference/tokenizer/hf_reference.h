// Shared helpers of the tokenizer reference tests: the pinned venv Python (GRPO_REFERENCE_PYTHON)
// running the helper scripts of this folder, and the reference tokenizer folders.
#pragma once

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/run_command.h"
#include "tests/tokenizer/tokenizer_test_support.h"

namespace grpo::testing {

inline std::string reference_python() { return GRPO_REFERENCE_PYTHON; }
inline std::string reference_scripts_dir() { return source_dir() + "/tests/reference/tokenizer"; }
inline std::string reference_tokenizer_dir(const std::string& name) {
  return source_dir() + "/.cache/reference-tokenizers/" + name;
}

// "" when the venv and the tokenizer folders are there, else what is missing and what makes it.
// A missing venv is a failure, not a skip: these tests are the only check against the real
// implementations, and a machine without them would otherwise pass silently.
inline std::string hf_reference_problem(const std::vector<std::string>& tokenizers) {
  namespace fs = std::filesystem;
  if (!fs::exists(reference_python()))
    return "missing " + reference_python() +
           " (the pinned Python with tokenizers and transformers) — run scripts/install-deps.sh";
  for (const std::string& name : tokenizers)
    if (!fs::exists(reference_tokenizer_dir(name) + "/tokenizer.json"))
      return "missing " + reference_tokenizer_dir(name) +
             "/tokenizer.json — run scripts/install-deps.sh (it calls scripts/fetch-reference-tokenizers.sh)";
  return "";
}

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs `script` of this folder with the venv Python; throws with its output when it fails.
inline void run_reference_script(const std::string& script, const std::vector<std::string>& args) {
  std::string cmd = shell_quote(reference_python()) + " " + shell_quote(reference_scripts_dir() + "/" + script);
  for (const std::string& a : args) cmd += " " + shell_quote(a);
  const CommandResult r = run_command(cmd + " 2>&1");
  if (r.exit_code != 0)
    throw std::runtime_error(script + " failed (exit " + std::to_string(r.exit_code) + "; scripts/install-deps.sh " +
                             "makes the venv): " + cmd + "\n" + r.output);
}

}  // namespace grpo::testing
