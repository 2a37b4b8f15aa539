// python_reward: scores completions with a user's Python reward function, called the way the
// anchor it was written for calls it (docs/python-rewards.md):
//   plain  f(completion, ground_truth, **columns) -> float
//   verl   f(data_source=..., solution_str=..., ground_truth=..., extra_info=...) -> float | {"score": ...}
//   trl    f(prompts=[...], completions=[...], <column>=[...], ...) -> [float | None, ...]
// in a pool of persistent interpreters (worker_pool.h), inside the bubblewrap sandbox by
// default (no network, a read-only file system but a private /tmp). Its scores are unbounded
// (ScoreRange::kUnbounded): TRL and verl rewards are arbitrary floats.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "driver_source.h"
#include "grpo/sdk/config_view.h"
#include "grpo/sdk/log.h"
#include "grpo/sdk/plugin.h"
#include "grpo/sdk/verifier.h"
#include "plugins/verifiers/python_reward/worker_pool.h"
#include "plugins/shared/sandbox/cgroup.h"
#include "plugins/shared/sandbox/sandbox.h"

namespace {

namespace sdk = ::grpo::sdk;
namespace fs = std::filesystem;
using json = nlohmann::json;
using grpo_python_reward::PoolSettings;
using grpo_python_reward::RowOutcome;
using grpo_python_reward::WorkerPool;

// Unsandboxed programs run without cgroup leaves: no detection (and none of its side effects).
const grpo_sandbox::CgroupSupport kNoCgroup{};

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// `name` on $PATH (a name without '/'), or the path itself; "" when nothing executable is there.
std::string find_executable(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? fs::absolute(name).string() : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  for (;;) {
    const std::size_t colon = dirs.find(':', start);
    std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(candidate.c_str(), X_OK) == 0)
      return fs::absolute(candidate).string();
    if (colon == std::string::npos) return "";
    start = colon + 1;
  }
}

// What the interpreter is, from itself: its real executable and the folders it reads.
struct Interpreter {
  std::string executable, version;
  std::vector<std::string> folders;  // prefixes and sys.path entries that exist
};

// sys.executable, not its real path: a venv is a venv only when started through its own
// bin/python (pyvenv.cfg sits beside it); a pyenv shim resolves to the real interpreter here.
constexpr const char* kProbe =
    "import json, os, sys\n"
    "real = os.path.realpath(sys.executable)\n"
    "print(json.dumps({'executable': sys.executable, 'version': sys.version.split()[0],\n"
    "  'folders': [p for p in [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,\n"
    "                          os.path.dirname(real)] + sys.path if p and os.path.exists(p)]}))\n";

Interpreter probe_interpreter(const sdk::ConfigView& cfg, const std::string& python,
                              const std::vector<std::pair<std::string, std::string>>& env) {
  grpo_sandbox::Sandbox direct("", python, 1, 0, kNoCgroup);
  grpo_sandbox::SandboxCommand command;
  // -E: the sandbox passes no PYTHON* variable of this process, only `env`'s.
  command.python_args = {"-E", "-c", kProbe};
  command.isolated = false;
  command.env = env;
  grpo_sandbox::SandboxLimits limits;
  limits.wall_seconds = 60.0;
  const grpo_sandbox::RunResult r = direct.run(command, "", limits);
  const json facts = json::parse(r.out, nullptr, false);
  if (!r.exited_cleanly() || !facts.is_object() || !facts.contains("executable"))
    cfg.fail("python", python + " does not run as a Python 3 interpreter" +
                           (r.error.empty() ? std::string() : ": " + r.error) +
                           (r.err.empty() ? std::string() : ": " + r.err.substr(0, 400)));
  Interpreter out;
  out.executable = facts.value("executable", python);
  out.version = facts.value("version", std::string());
  if (facts.contains("folders") && facts["folders"].is_array())
    for (const auto& f : facts["folders"])
      if (f.is_string()) out.folders.push_back(f.get<std::string>());
  return out;
}

// The value a driver's "nonfinite" names (Python's repr: "inf", "-inf", "nan").
double non_finite(const std::string& repr) {
  if (repr == "inf") return std::numeric_limits<double>::infinity();
  if (repr == "-inf") return -std::numeric_limits<double>::infinity();
  return std::numeric_limits<double>::quiet_NaN();
}

// Folders, without duplicates and without those inside another one of the list.
std::vector<std::string> outermost(std::vector<std::string> paths) {
  for (auto& p : paths) p = fs::path(p).lexically_normal().string();
  for (auto& p : paths)
    while (p.size() > 1 && p.back() == '/') p.pop_back();
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  std::vector<std::string> out;
  for (const auto& p : paths) {
    bool inside = false;
    for (const auto& o : out) inside = inside || o == "/" || p.rfind(o + "/", 0) == 0;
    if (!inside) out.push_back(p);
  }
  return out;
}

class PythonReward : public sdk::Verifier {
 public:
  explicit PythonReward(const sdk::ConfigView& cfg) {
    const std::string path = cfg.get_string("path", "");
    const std::string module = cfg.get_string("module", "");
    if (path.empty() == module.empty())
      cfg.fail(path.empty() ? "path" : "module",
               "give exactly one of `path` (a .py file) and `module` (an importable module name)");
    signature_ = cfg.get_choice("signature", "plain", {"plain", "verl", "trl"});
    const std::string function = cfg.get_string("function", signature_ == "verl" ? "compute_score" : "");
    if (function.empty())
      cfg.fail("function", "name the reward function to call (e.g. function: my_reward); only the verl signature "
                           "defaults it, to compute_score");
    score_range_ = cfg.get_choice("score_range", "unbounded", {"unbounded", "unit"}) == "unit"
                       ? sdk::ScoreRange::kUnit
                       : sdk::ScoreRange::kUnbounded;
    const bool sandboxed = cfg.get_bool("sandbox", true);
    const std::string python_option = cfg.get_string("python", "python3");
    const std::string bwrap = cfg.get_string("bwrap", "/usr/bin/bwrap");
    const std::int64_t workers = cfg.get_int_in_range("workers", 0, 0, 1024, "(0 = the number of cores)");
    const unsigned threads = std::max(1u, std::thread::hardware_concurrency());

    PoolSettings s;
    s.workers = workers > 0 ? static_cast<unsigned>(workers) : threads;
    s.batch_size = static_cast<unsigned>(cfg.get_int_in_range("batch_size", 32, 1, 65536));
    s.timeout_s = cfg.get_double_in_range("timeout_s", 10.0, 0.0, 86400.0, sdk::Interval::kLeftOpen, "seconds");
    s.start_timeout_s =
        cfg.get_double_in_range("start_timeout_s", 120.0, 0.0, 86400.0, sdk::Interval::kLeftOpen, "seconds");
    s.trl = signature_ == "trl";
    s.command.reaper = true;  // long-lived: orphans of what the function starts are reaped
    s.limits.cpu_seconds = 0;  // a persistent worker: timeout_s bounds each call instead
    s.limits.memory_bytes = static_cast<std::uint64_t>(cfg.get_int_at_least("memory_mb", 4096, 64)) << 20;
    s.limits.max_processes = static_cast<std::uint64_t>(cfg.get_int_at_least("max_processes", 256, 1));
    s.limits.tmp_bytes = static_cast<std::uint64_t>(cfg.get_int_at_least("tmp_mb", 256, 1)) << 20;
    s.limits.shm_bytes = static_cast<std::uint64_t>(cfg.get_int_at_least("shm_mb", 64, 1)) << 20;
    s.limits.file_bytes = s.limits.tmp_bytes;

    if (const sdk::ConfigValue* env = cfg.node() ? cfg.node()->find("env") : nullptr; env && !env->is_null()) {
      env->mark_used();
      if (!env->is_map()) cfg.fail("env", "expected a map of environment variables (NAME: value)");
      for (const auto& entry : env->entries()) {
        entry.value.mark_used();
        if (!entry.value.is_scalar())
          cfg.fail("env", "variable " + entry.key + ": expected a string value, got " + entry.value.type_description());
        s.command.env.emplace_back(entry.key, entry.value.scalar());
      }
    }
    std::vector<std::string> python_path;
    for (const std::string& p : cfg.get_string_list("python_path", {})) {
      if (!fs::is_directory(p)) cfg.fail("python_path", "not a folder: " + p);
      python_path.push_back(fs::absolute(p).lexically_normal().string());
    }
    std::vector<std::string> read_only;
    for (const std::string& p : cfg.get_string_list("read_only_paths", {})) {
      if (!fs::exists(p)) cfg.fail("read_only_paths", "no such file or folder: " + p);
      read_only.push_back(fs::absolute(p).lexically_normal().string());
    }
    const std::string ground_truth_key = cfg.get_string("ground_truth_key", "ground_truth");
    const std::string completions_as = cfg.get_choice("completions_as", "text", {"text", "messages"});

    std::string abs_path;
    if (!path.empty()) {
      std::error_code ec;
      if (!fs::is_regular_file(path, ec)) cfg.fail("path", "no such file: " + path + " (relative paths start at the working directory)");
      abs_path = fs::absolute(path).lexically_normal().string();
    }
    const std::string python = find_executable(python_option);
    if (python.empty())
      cfg.fail("python", "no executable interpreter " + python_option +
                             (python_option.find('/') == std::string::npos ? " on $PATH" : ""));
    const Interpreter interp = probe_interpreter(cfg, python, s.command.env);

    s.name = "python_reward (" + (abs_path.empty() ? module : fs::path(abs_path).filename().string()) + ":" + function + ")";
    json driver = {{"function", function}, {"signature", signature_}, {"python_path", python_path},
                   {"ground_truth_key", ground_truth_key}, {"completions_as", completions_as},
                   {"max_line_bytes", grpo_python_reward::kMaxAnswerBytes}};
    if (!abs_path.empty()) driver["path"] = abs_path;
    else driver["module"] = module;
    s.driver_source = grpo_python_reward::kDriverSource;
    s.driver_config = dump(driver);

    if (sandboxed) {
      if (access(bwrap.c_str(), X_OK) != 0)
        cfg.fail("bwrap", "bubblewrap not found at " + bwrap +
                              " (Debian: apt-get install bubblewrap), and `sandbox: true` (the default) runs the "
                              "reward in it; set sandbox: false to run it unsandboxed");
      // The interpreter's own folders, the reward's and the ones the config names, read-only.
      std::vector<std::string> folders = interp.folders;
      folders.insert(folders.end(), python_path.begin(), python_path.end());
      folders.insert(folders.end(), read_only.begin(), read_only.end());
      if (!abs_path.empty()) folders.push_back(fs::path(abs_path).parent_path().string());
      for (const auto& [name, value] : s.command.env)
        if (name == "PYTHONPATH") {
          std::size_t start = 0;
          for (;;) {
            const std::size_t colon = value.find(':', start);
            const std::string p = value.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
            if (!p.empty() && fs::exists(p)) folders.push_back(fs::absolute(p).string());
            if (colon == std::string::npos) break;
            start = colon + 1;
          }
        }
      s.command.read_only_paths = outermost(folders);
      // The workers keep this process's uid (root: without capabilities): a reward function is
      // the user's code, and it must read what the user can (an interpreter or a project under
      // /root). The sandbox guards what the completions it is fed could make it do: no network,
      // nothing writable but its tmp, no host process in sight.
      sandbox_ = std::make_unique<grpo_sandbox::Sandbox>(bwrap, interp.executable, s.workers, /*uid_base=*/0,
                                                          grpo_sandbox::cgroup_support());
    } else {
      sandbox_ = std::make_unique<grpo_sandbox::Sandbox>("", python, s.workers, 0, kNoCgroup);
    }
    concurrent_calls_ = s.workers * s.batch_size;
    const std::string name = s.name;
    const unsigned n_workers = s.workers, batch = s.batch_size;
    try {
      pool_ = std::make_unique<WorkerPool>(*sandbox_, std::move(s));
    } catch (const std::exception& e) {
      std::string why = e.what();
      if (sandboxed && why.find("ModuleNotFoundError") != std::string::npos)
        why += "\n(sandboxed, the worker sees the interpreter's own folders, the reward file's folder, "
               "python_path and read_only_paths, and no environment variable but `env`'s)";
      cfg.fail(path.empty() ? "module" : "path", why);
    }
    sdk::log_info(name + ": " + std::to_string(n_workers) + " workers (Python " + interp.version + ", " +
                  (sandboxed ? "sandboxed" : "not sandboxed") + "), batches of up to " + std::to_string(batch) +
                  " rows, signature " + signature_);
  }

  sdk::VerifierResult verify(const sdk::VerifierInput& input) const override {
    // The row as the driver reads it; the dataset's JSON (ground truth, columns) goes in as
    // written, after a validity check.
    std::string row = "{\"c\":" + dump(std::string(input.completion));
    const bool gt_valid = json::accept(input.ground_truth.begin(), input.ground_truth.end());
    row += ",\"g\":" + (gt_valid ? std::string(input.ground_truth) : dump(std::string(input.ground_truth)));
    row += ",\"l\":" + dump(std::string(input.dataset));
    if (signature_ == "trl") row += ",\"p\":" + dump(std::string(input.prompt));
    const std::size_t first = input.metadata.find_first_not_of(" \t\r\n");
    const bool meta_valid = first != std::string_view::npos && input.metadata[first] == '{' &&
                            json::accept(input.metadata.begin(), input.metadata.end());
    row += ",\"m\":" + (meta_valid ? std::string(input.metadata) : std::string("{}")) + "}";

    RowOutcome out = pool_->score(std::move(row));
    sdk::VerifierResult result;
    switch (out.kind) {
      case RowOutcome::Kind::kScore:
        result.score = out.score;
        result.details = out.details;
        break;
      case RowOutcome::Kind::kNotApplicable:  // TRL: None means the reward does not apply
        result.score = 0.0;
        result.details = R"({"not_applicable":true,"returned":"None"})";
        break;
      case RowOutcome::Kind::kNonFinite:  // the host counts it as a failure, naming the value
        result.score = non_finite(out.error);
        result.details = dump(json{{"returned", out.error}});
        break;
      case RowOutcome::Kind::kError:
        throw std::runtime_error(out.error);
      case RowOutcome::Kind::kTimeout:  // reward/verifier_timeouts, not an error
        throw sdk::VerifierTimeout(out.error);
    }
    return result;
  }

  sdk::ScoreRange score_range() const override { return score_range_; }
  std::uint32_t concurrent_calls() const override { return concurrent_calls_; }

 private:
  std::string signature_;
  sdk::ScoreRange score_range_ = sdk::ScoreRange::kUnbounded;
  std::uint32_t concurrent_calls_ = 0;
  std::unique_ptr<grpo_sandbox::Sandbox> sandbox_;
  std::unique_ptr<WorkerPool> pool_;  // declared after sandbox_: destroyed first
};

}  // namespace

GRPO_PLUGIN("python_reward", "1.0.0", "Python reward functions (TRL, verl or plain) in a pool of sandboxed workers") {
  registrar.add_verifier<PythonReward>("python_reward", "scores with a Python function: signature trl | verl | plain");
}
