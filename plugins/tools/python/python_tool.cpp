// python: a tool that runs the policy's Python code in the bubblewrap sandbox the code verifier
// uses (plugins/shared/sandbox, docs/sandbox.md) and shows it what the code printed. See
// README.md in this folder for the options and the observation format.
//
// Two modes. One-shot (the default): every call is a fresh program, like open-instruct's code
// tool. Stateful (`stateful: true`): every trajectory gets one persistent interpreter
// (interpreters.h, driver.py) in which its calls run as cells of one namespace, like a
// notebook; a fault (time-out, crash) kills it, and the next call says that the state is gone.
//
// The observation is what a terminal would show: stdout, then stderr (a traceback ends it),
// each cut to max_output_chars characters with a "[truncated N chars]" marker (stdout keeps its
// beginning, stderr its end, where a traceback says what went wrong), then one
// bracketed line for anything else the policy must know (a time-out, a killed program, an exit
// status that printed nothing). Untrusted code never runs unsandboxed: a machine where the
// sandbox does not work is a configuration error, as for the code verifier.
//
// Depends on the SDK, header-only nlohmann-json and the sandbox library (POSIX, cgroupfs): no
// LibTorch. At run time: bubblewrap and a Python 3 interpreter.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include <nlohmann/json.hpp>

#include "driver_source.h"
#include "grpo/sdk/config_view.h"
#include "grpo/sdk/log.h"
#include "grpo/sdk/plugin.h"
#include "grpo/sdk/text.h"
#include "grpo/sdk/tool.h"
#include "plugins/tools/python/interpreters.h"
#include "plugins/shared/sandbox/sandbox.h"

namespace {

namespace sdk = ::grpo::sdk;
using json = nlohmann::ordered_json;
using grpo_python_tool::InterpreterPool;
using grpo_python_tool::InterpreterSettings;
using grpo_python_tool::Outcome;
using grpo_sandbox::Sandbox;
using grpo_sandbox::SandboxLimits;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// `s` with every byte that is not part of a valid UTF-8 sequence replaced by U+FFFD: a program
// may write any bytes, the policy reads text.
std::string valid_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size() && !(n == 2 && c < 0xC2);
    for (std::size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && n == 3) {  // no overlong forms, no surrogates
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);
    }
    if (ok && n == 4) {
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      ok = c <= 0xF4 && !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
    }
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

// Characters (code points) of valid UTF-8 text.
std::size_t char_count(std::string_view s) {
  std::size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// The first (or, with `tail`, the last) `max_chars` characters of valid UTF-8 text.
std::string some_chars(const std::string& s, std::size_t max_chars, bool tail) {
  const std::size_t n = char_count(s);
  if (n <= max_chars) return s;
  const std::size_t skip = tail ? n - max_chars : max_chars;  // characters before the cut
  std::size_t seen = 0;
  for (std::size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && seen++ == skip) return tail ? s.substr(i) : s.substr(0, i);
  return s;
}

// A one-shot program's stdout or stderr, as the driver reports a cell's: the kept characters
// and the full length.
void clip_stream(const std::string& raw, std::size_t max_chars, bool tail, std::string* kept, std::size_t* chars) {
  const std::string text = valid_utf8(raw);
  *chars = char_count(text);
  *kept = some_chars(text, max_chars, tail);
}

void append_block(std::string* text, const std::string& block) {
  if (block.empty()) return;
  if (!text->empty() && text->back() != '\n') *text += '\n';
  *text += block;
}

class PythonTool : public sdk::Tool {
 public:
  explicit PythonTool(const sdk::ConfigView& cfg)
      : timeout_s_(cfg.get_double_in_range("timeout_s", 5.0, 0.0, 3600.0, sdk::Interval::kLeftOpen, "seconds")),
        max_output_chars_(static_cast<std::size_t>(cfg.get_int_in_range("max_output_chars", 1000, 1, 1000000))),
        stateful_(cfg.get_bool("stateful", false)) {
    const std::string python = cfg.get_string("python", "/usr/bin/python3");
    const std::string bwrap = cfg.get_string("bwrap", "/usr/bin/bwrap");
    limits_.wall_seconds = timeout_s_;
    limits_.memory_bytes = static_cast<std::uint64_t>(cfg.get_int_at_least("memory_mb", 1024, 32)) << 20;
    limits_.max_processes = static_cast<std::uint64_t>(cfg.get_int_at_least("max_processes", 32, 1));
    limits_.output_bytes = static_cast<std::uint64_t>(cfg.get_int_at_least("output_kb", 1024, 1)) << 10;
    limits_.tmp_bytes = static_cast<std::uint64_t>(cfg.get_int_at_least("tmp_mb", 64, 1)) << 20;
    limits_.shm_bytes = static_cast<std::uint64_t>(cfg.get_int_at_least("shm_mb", 64, 1)) << 20;
    limits_.file_bytes = limits_.tmp_bytes;
    const std::int64_t max_interpreters = cfg.get_int_in_range("max_interpreters", 64, 1, 4096);
    const std::int64_t concurrency = cfg.get_int_in_range("max_concurrency", 0, 0, 4096, "(0 = the number of cores)");
    if (bwrap.empty())
      cfg.fail("bwrap", "the python tool runs the policy's code only in the sandbox: name bubblewrap's path");
    // One-shot programs are bounded per program; an interpreter lives for many calls, so only a
    // budget across its calls bounds its CPU time (a background thread that spins forever).
    if (!stateful_) limits_.cpu_seconds = static_cast<std::uint64_t>(std::ceil(timeout_s_));
    else limits_.cpu_seconds = static_cast<std::uint64_t>(std::ceil(timeout_s_ * 100));
    const unsigned slots = stateful_            ? static_cast<unsigned>(max_interpreters)
                           : concurrency > 0    ? static_cast<unsigned>(concurrency)
                                                : std::max(1u, std::thread::hardware_concurrency());
    sandbox_ = std::make_unique<Sandbox>(bwrap, python, slots, /*uid_base=*/60000u, grpo_sandbox::cgroup_support());
    if (const Sandbox::SelfTest test = sandbox_->self_test(); !test.why.empty()) cfg.fail(test.option, test.message());
    if (stateful_) {
      InterpreterSettings s;
      s.driver_source = grpo_python_tool::kDriverSource;
      s.driver_config = json{{"max_chars", max_output_chars_}}.dump();
      // The driver's answer holds at most max_chars characters of stdout and of stderr, each at
      // most 6 bytes once JSON-escaped (\u001b): a longer line is a cell writing into the channel.
      s.max_answer_bytes = 2 * 6 * max_output_chars_ + 4096;
      s.max_interpreters = static_cast<std::size_t>(max_interpreters);
      s.limits = limits_;
      pool_ = std::make_unique<InterpreterPool>(*sandbox_, std::move(s));
      // The driver itself must work with this interpreter: checked now, not at the first call.
      const Outcome probe = pool_->run("grpo-python-tool-self-test", "print(6 * 7)", 30.0);
      pool_->end("grpo-python-tool-self-test");
      if (!probe.error.empty() || probe.out != "42\n")
        cfg.fail("python", "the stateful interpreter does not work with " + python + ": " +
                               (probe.error.empty() ? probe.killed + probe.err : probe.error));
    }
  }

  std::string description() const override {
    return stateful_ ? "Runs Python 3 code and returns what it prints (stdout, then stderr). Variables, functions and "
                       "imports persist across calls within this conversation. No network access."
                     : "Runs a Python 3 program and returns what it prints (stdout, then stderr). Each call is a fresh "
                       "program: print the results you need. No network access.";
  }

  std::string parameters() const override {
    return R"({"type": "object", "properties": {"code": {"type": "string", "description": )"
           R"("The Python code to run; use print() to see values"}}, "required": ["code"]})";
  }

  sdk::ToolObservation call(std::string_view arguments, const sdk::ToolCallContext& context) const override {
    const nlohmann::json args = nlohmann::json::parse(arguments.begin(), arguments.end(), nullptr, false);
    if (!args.is_object() || !args.contains("code") || !args["code"].is_string()) {
      sdk::ToolObservation obs;
      obs.text = "Error: expected the arguments {\"code\": \"...\"}";
      obs.is_error = true;
      obs.details = dump(json{{"error", "bad arguments: " + sdk::clip_utf8(arguments, 200)}});
      return obs;
    }
    const std::string code = args["code"].get<std::string>();
    const double timeout = context.timeout_s > 0.0 ? std::min(timeout_s_, context.timeout_s) : timeout_s_;
    const Outcome outcome = stateful_ ? pool_->run(context.trajectory_id, code, timeout) : run_once(code, timeout);
    return observation(outcome, timeout);
  }

  void end_trajectory(std::string_view trajectory_id) const override {
    if (pool_) pool_->end(trajectory_id);
  }

 private:
  Outcome run_once(const std::string& code, double timeout) const {
    SandboxLimits limits = limits_;
    limits.wall_seconds = timeout;
    limits.cpu_seconds = static_cast<std::uint64_t>(std::ceil(timeout));
    const grpo_sandbox::RunResult r = sandbox_->run({"/code/main.py"}, {{"/code/main.py", code}}, "", limits);
    Outcome o;
    if (!r.started) {
      o.error = r.error;
      return o;
    }
    clip_stream(r.out, max_output_chars_, /*tail=*/false, &o.out, &o.out_chars);
    clip_stream(r.err, max_output_chars_, /*tail=*/true, &o.err, &o.err_chars);
    o.exit_code = r.exit_code;
    o.timed_out = r.timed_out;
    // The memory limit first: a program it starved often runs into the clock as well.
    if (r.memory_limit) o.killed = "it ran out of memory (memory_mb)";
    else if (r.output_limit) o.killed = "it printed more than " + std::to_string(limits.output_bytes >> 10) + " KB (output_kb)";
    else if (r.signal && !r.timed_out) o.killed = "it was killed by signal " + std::to_string(r.signal);
    if (!o.killed.empty()) o.timed_out = false;
    o.seconds = r.seconds;
    return o;
  }

  // Stdout keeps its beginning, stderr its end (a traceback's last line says what went wrong).
  std::string clipped(const std::string& kept, std::size_t chars, bool tail) const {
    if (chars <= max_output_chars_) return kept;
    const std::string marker = "[truncated " + std::to_string(chars - max_output_chars_) + " chars]";
    return tail ? marker + " ..." + kept : kept + "... " + marker;
  }

  sdk::ToolObservation observation(const Outcome& o, double timeout) const {
    sdk::ToolObservation obs;
    json details;
    if (!o.error.empty()) {
      obs.text = "Error: the code could not be run: " + o.error;
      obs.is_error = true;
      details["error"] = o.error;
      obs.details = dump(details);
      return obs;
    }
    std::string text;
    append_block(&text, clipped(o.out, o.out_chars, /*tail=*/false));
    append_block(&text, clipped(o.err, o.err_chars, /*tail=*/true));
    if (o.timed_out)
      append_block(&text, "[Timed out after " + number_text(timeout) + " s" +
                               (o.state_lost_now ? "; the interpreter was stopped and its variables are lost]" : "]"));
    else if (o.state_lost_now)
      append_block(&text, "[The Python interpreter " + o.killed + "; its variables are lost]");
    else if (!o.killed.empty())
      append_block(&text, "[The program was stopped: " + o.killed + "]");
    else if (o.exit_code != 0 && o.err.empty())
      append_block(&text, "[Exit status " + std::to_string(o.exit_code) + "]");
    if (text.empty()) text = "(no output)";
    if (!o.lost.empty())
      text = "[A new Python interpreter was started: the variables of earlier calls are lost (the previous one " + o.lost +
             ")]\n" + text;
    obs.text = std::move(text);
    obs.is_error = o.timed_out || !o.killed.empty() || o.exit_code != 0;
    details["exit_code"] = o.exit_code;
    details["timed_out"] = o.timed_out;
    if (!o.killed.empty()) details["killed"] = o.killed;
    details["stdout_chars"] = o.out_chars;
    details["stderr_chars"] = o.err_chars;
    details["truncated"] = o.out_chars > max_output_chars_ || o.err_chars > max_output_chars_;
    details["seconds"] = o.seconds;
    if (stateful_) {
      details["interpreter"] = o.state_lost_now ? "lost" : o.fresh ? "new" : "kept";
      if (!o.lost.empty()) details["state_lost"] = o.lost;
    }
    obs.details = dump(details);
    return obs;
  }

  double timeout_s_;
  std::size_t max_output_chars_;
  bool stateful_;
  SandboxLimits limits_;
  std::unique_ptr<Sandbox> sandbox_;
  std::unique_ptr<InterpreterPool> pool_;  // stateful only
};

}  // namespace

GRPO_PLUGIN("python", "1.0.0", "runs the policy's Python code in a bubblewrap sandbox") {
  registrar.add_tool<PythonTool>("python", "runs Python code in a sandbox and returns its output");
}
