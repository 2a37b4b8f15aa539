// code and code_stdio: run the completion's last fenced Python block against the ground
// truth's tests, each test in its own sandboxed process (sandbox.h, docs/sandbox.md), and
// score the pass rate (open-instruct's code reward; shared/REFERENCE.md "Verifier
// conventions").
//
// Ground truth (a JSON value, or a JSON string holding one, as open-instruct stores it):
//   {"test": "def check(candidate): ...", "entry_point": "f"}   HumanEval: one test,
//                                                                 test + check(f); with a
//   "prompt", a block that does not define f is taken as f's body: prompt + block
//   ["assert f(1) == 2", ...]                                     asserts, one test each
//   {"asserts"|"test_list": [...], "setup"|"test_setup_code": "..."}   MBPP
//   {"inputs": [...], "outputs": [...]}                           stdin/stdout cases
//   [{"input": "...", "output": "..."}, ...]                      open-instruct's stdio form
//   {"input_output": "<that object as a JSON string>"}            APPS / TACO
// Assert tests pass when the process exits 0 AND prints, last, a random token that the
// harness read from stdin before running the code: `exit(0)` before the tests does not pass.
// stdio tests pass when stdout equals the expected output as open-instruct's grade_stdio
// compares them: both stripped, split into lines, each line stripped; lines equal as text or
// as the same list of decimal numbers ("1.0" == "1").
// Depends on the SDK, header-only nlohmann-json and POSIX: no LibTorch.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "grpo/sdk/config_view.h"
#include "grpo/sdk/log.h"
#include "grpo/sdk/plugin.h"
#include "grpo/sdk/text.h"
#include "grpo/sdk/verifier.h"
#include "plugins/shared/sandbox/sandbox.h"

namespace {

namespace sdk = ::grpo::sdk;
using json = nlohmann::ordered_json;
using grpo_sandbox::CgroupSupport;
using grpo_sandbox::RunResult;
using grpo_sandbox::Sandbox;
using grpo_sandbox::SandboxFile;
using grpo_sandbox::SandboxLimits;

constexpr std::size_t kPreview = 300;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The last complete fenced block (```python ... ```, ```py, or a bare ```), or false.
bool last_code_block(std::string_view text, std::string* code) {
  bool found = false;
  std::size_t pos = 0;
  for (;;) {
    const std::size_t open = text.find("```", pos);
    if (open == std::string_view::npos) break;
    const std::size_t line_end = text.find('\n', open);
    if (line_end == std::string_view::npos) break;
    const std::string_view tag = text.substr(open + 3, line_end - open - 3);
    const std::size_t close = text.find("```", line_end + 1);
    if (close == std::string_view::npos) break;
    std::string t(tag);
    t.erase(std::remove_if(t.begin(), t.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); }), t.end());
    for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (t.empty() || t == "python" || t == "py" || t == "python3") {
      *code = std::string(text.substr(line_end + 1, close - line_end - 1));
      found = true;
    }
    pos = close + 3;
  }
  return found;
}

struct TestCase {
  std::string script;                // assert mode: Python run after the solution
  bool stdio = false;
  std::string input, expected_output;  // stdio mode
};

std::string as_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {  // a list of lines
    std::string s;
    for (const auto& line : v) s += (line.is_string() ? line.get<std::string>() : line.dump()) + "\n";
    return s;
  }
  return v.dump();
}

// Tests of a ground truth, or empty with `why`.
// HumanEval ground truths may carry the problem's "prompt" (signature + docstring): a
// completion that gives only the function body is run as prompt + body.
struct PromptPrefix {
  std::string prompt, entry_point;
};

std::vector<TestCase> parse_tests(nlohmann::json gt, std::string* why, PromptPrefix* prefix) {
  std::vector<TestCase> tests;
  if (gt.is_string()) {
    const std::string s = gt.get<std::string>();
    nlohmann::json inner = nlohmann::json::parse(s, nullptr, false);
    if (!inner.is_discarded() && (inner.is_array() || inner.is_object())) gt = inner;
    else {
      tests.push_back({s});  // a test script
      return tests;
    }
  }
  if (gt.is_object() && gt.contains("input_output") && gt["input_output"].is_string()) {
    gt = nlohmann::json::parse(gt["input_output"].get<std::string>(), nullptr, false);
    if (gt.is_discarded()) {
      *why = "ground_truth.input_output is not valid JSON";
      return {};
    }
  }
  if (gt.is_array() && !gt.empty() && gt[0].is_object()) {  // open-instruct stdio: [{"input", "output"}]
    for (const auto& t : gt) {
      if (!t.is_object() || !t.contains("input") || !t.contains("output")) {
        *why = "a list of stdio tests must hold {\"input\", \"output\"} objects";
        return {};
      }
      TestCase c;
      c.stdio = true;
      c.input = as_text(t["input"]);
      c.expected_output = as_text(t["output"]);
      tests.push_back(c);
    }
  } else if (gt.is_array()) {
    for (const auto& t : gt) {
      if (!t.is_string()) {
        *why = "a list ground truth must hold assert strings";
        return {};
      }
      tests.push_back({t.get<std::string>()});
    }
  } else if (gt.is_object() && gt.contains("test") && gt["test"].is_string()) {
    std::string script = gt["test"].get<std::string>();
    if (gt.contains("entry_point") && gt["entry_point"].is_string()) {
      script += "\n\ncheck(" + gt["entry_point"].get<std::string>() + ")\n";
      if (gt.contains("prompt") && gt["prompt"].is_string())
        *prefix = {gt["prompt"].get<std::string>(), gt["entry_point"].get<std::string>()};
    }
    tests.push_back({script});
  } else if (gt.is_object() && (gt.contains("asserts") || gt.contains("test_list"))) {
    const auto& list = gt.contains("asserts") ? gt["asserts"] : gt["test_list"];
    std::string setup;
    for (const char* key : {"setup", "test_setup_code", "test_imports"})
      if (gt.contains(key)) setup += as_text(gt[key]) + "\n";
    if (!list.is_array()) {
      *why = "ground_truth asserts must be a list of strings";
      return {};
    }
    for (const auto& t : list) {
      if (!t.is_string()) {
        *why = "ground_truth asserts must be a list of strings";
        return {};
      }
      tests.push_back({setup + t.get<std::string>()});
    }
  } else if (gt.is_object() && gt.contains("inputs") && gt.contains("outputs")) {
    const auto &in = gt["inputs"], &out = gt["outputs"];
    if (!in.is_array() || !out.is_array() || in.size() != out.size()) {
      *why = "ground_truth inputs and outputs must be lists of the same length";
      return {};
    }
    for (std::size_t i = 0; i < in.size(); ++i) {
      TestCase t;
      t.stdio = true;
      t.input = as_text(in[i]);
      t.expected_output = as_text(out[i]);
      tests.push_back(t);
    }
  } else {
    *why = "ground_truth is not a test: expected {\"test\", \"entry_point\"}, a list of asserts, "
           "{\"asserts\"|\"test_list\": [...]} or {\"inputs\": [...], \"outputs\": [...]}";
    return {};
  }
  if (tests.empty()) *why = "ground_truth has no tests";
  return tests;
}

bool py_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string py_strip(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && py_space(s[b])) ++b;
  while (e > b && py_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// open-instruct's get_stripped_lines: strip the whole text, split at '\n', strip each line.
std::vector<std::string> stripped_lines(const std::string& text) {
  const std::string all = py_strip(text);
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = all.find('\n', start);
    lines.push_back(py_strip(all.substr(start, end == std::string::npos ? std::string::npos : end - start)));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return lines;
}

// A canonical form of a Python Decimal literal, equal for equal values ("1.0", "1", "1e0" ->
// "+1e0"), or false when the token is not a decimal number.
bool canonical_decimal(const std::string& tok, std::string* out) {
  std::size_t i = 0;
  char sign = '+';
  if (i < tok.size() && (tok[i] == '+' || tok[i] == '-')) sign = tok[i++];
  std::string lower;
  for (std::size_t k = i; k < tok.size(); ++k) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(tok[k])));
  if (lower == "inf" || lower == "infinity") {
    *out = std::string(1, sign) + "inf";
    return true;
  }
  if (lower == "nan") {  // NaN equals nothing: a unique form per call
    static std::atomic<unsigned long> n{0};
    *out = "nan" + std::to_string(n++);
    return true;
  }
  std::string digits;
  long long frac = 0;
  bool dot = false, any = false;
  for (; i < tok.size(); ++i) {
    const char c = tok[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digits += c;
      any = true;
      if (dot) ++frac;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (!any) return false;
  long long exp = 0;
  if (i < tok.size() && (tok[i] == 'e' || tok[i] == 'E')) {
    ++i;
    bool neg = false;
    if (i < tok.size() && (tok[i] == '+' || tok[i] == '-')) neg = tok[i++] == '-';
    if (i >= tok.size() || tok.size() - i > 15) return false;
    for (; i < tok.size(); ++i) {
      if (!std::isdigit(static_cast<unsigned char>(tok[i]))) return false;
      exp = exp * 10 + (tok[i] - '0');
    }
    if (neg) exp = -exp;
  }
  if (i != tok.size()) return false;
  exp -= frac;
  const std::size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) {
    *out = "0";
    return true;
  }
  digits.erase(0, first);
  while (digits.back() == '0') {
    digits.pop_back();
    ++exp;
  }
  *out = std::string(1, sign) + digits + "e" + std::to_string(exp);
  return true;
}

// One line of output against the expected line: equal after stripping, or (as open-instruct
// does) the same whitespace-separated list of decimal numbers.
bool same_line(const std::string& got, const std::string& want) {
  if (got == want) return true;
  auto numbers = [](const std::string& line, std::vector<std::string>* out) {
    std::size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && py_space(line[i])) ++i;
      if (i >= line.size()) break;
      std::size_t j = i;
      while (j < line.size() && !py_space(line[j])) ++j;
      std::string c;
      if (!canonical_decimal(line.substr(i, j - i), &c)) return false;
      out->push_back(c);
      i = j;
    }
    return true;
  };
  std::vector<std::string> a, b;
  return numbers(got, &a) && numbers(want, &b) && a == b;
}

bool same_output(const std::string& got, const std::string& want) {
  const std::vector<std::string> a = stripped_lines(got), b = stripped_lines(want);
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same_line(a[i], b[i])) return false;
  return true;
}

// The harness of assert tests: reads the token before the solution runs, runs solution and
// test in one fresh namespace, prints the token last.
constexpr const char* kHarness =
    "import sys\n"
    "def _grpo_main():\n"
    "    token = sys.stdin.readline().strip()\n"
    "    ns = {'__name__': '__main__', '__builtins__': __builtins__}\n"
    "    for path in ('/code/solution.py', '/code/test.py'):\n"
    "        with open(path) as f:\n"
    "            source = f.read()\n"
    "        exec(compile(source, path, 'exec'), ns)\n"
    "    sys.stdout.flush()\n"
    "    sys.stdout.write('\\n' + token + '\\n')\n"
    "    sys.stdout.flush()\n"
    "_grpo_main()\n";

std::string tail(const std::string& s, std::size_t n) { return s.size() <= n ? s : "..." + s.substr(s.size() - n); }

class CodeVerifier : public sdk::Verifier {
 public:
  explicit CodeVerifier(const sdk::ConfigView& cfg)
      : python_(cfg.get_string("python", "/usr/bin/python3")),
        bwrap_(cfg.get_string("bwrap", "/usr/bin/bwrap")),
        pass_threshold_(cfg.get_double_in_range("pass_threshold", 0.0, 0.0, 1.0)),
        all_or_nothing_(cfg.get_bool("all_or_nothing", false)),
        require_block_(cfg.get_bool("require_code_block", true)),
        max_tests_(static_cast<std::size_t>(cfg.get_int_at_least("max_tests", 64, 1))) {
    limits_.wall_seconds = cfg.get_double_in_range("timeout_s", 5.0, 0.0, 3600.0, sdk::Interval::kLeftOpen, "seconds");
    limits_.cpu_seconds = static_cast<std::uint64_t>(std::ceil(limits_.wall_seconds));
    limits_.memory_bytes = static_cast<std::uint64_t>(cfg.get_int_at_least("memory_mb", 1024, 32)) << 20;
    limits_.max_processes = static_cast<std::uint64_t>(cfg.get_int_at_least("max_processes", 32, 1));
    limits_.output_bytes = static_cast<std::uint64_t>(cfg.get_int_at_least("output_kb", 1024, 1)) << 10;
    limits_.tmp_bytes = static_cast<std::uint64_t>(cfg.get_int_at_least("tmp_mb", 64, 1)) << 20;
    limits_.shm_bytes = static_cast<std::uint64_t>(cfg.get_int_at_least("shm_mb", 64, 1)) << 20;
    limits_.file_bytes = limits_.tmp_bytes;
    const bool require_cgroup = cfg.get_bool("require_cgroup", false);
    const std::int64_t concurrency = cfg.get_int_in_range("max_concurrency", 0, 0, 4096, "(0 = the number of cores)");
    const std::int64_t uid_base = cfg.get_int_in_range("sandbox_uid_base", 60000, 1000, 4000000000LL);
    const unsigned slots = concurrency > 0 ? static_cast<unsigned>(concurrency)
                                           : std::max(1u, std::thread::hardware_concurrency());
    sandbox_ = std::make_unique<Sandbox>(bwrap_, python_, slots, static_cast<unsigned>(uid_base),
                                         grpo_sandbox::cgroup_support());
    announce_bound(cfg, require_cgroup);
    // Never run untrusted code unsandboxed: a machine where the sandbox does not work is a
    // configuration error, reported before the run starts.
    if (const Sandbox::SelfTest test = sandbox_->self_test(); !test.why.empty()) cfg.fail(test.option, test.message());
  }

  sdk::VerifierResult verify(const sdk::VerifierInput& input) const override {
    sdk::VerifierResult result;
    json details;
    nlohmann::json gt = nlohmann::json::parse(input.ground_truth.begin(), input.ground_truth.end(), nullptr, false);
    if (gt.is_discarded()) {
      details["reason"] = "ground_truth is not valid JSON";
      result.details = dump(details);
      return result;
    }
    std::string why;
    PromptPrefix prefix;
    std::vector<TestCase> tests = parse_tests(gt, &why, &prefix);
    if (tests.empty()) {
      details["reason"] = why;
      result.details = dump(details);
      return result;
    }
    if (tests.size() > max_tests_) tests.resize(max_tests_);
    std::string code;
    if (!last_code_block(input.completion, &code)) {
      if (require_block_) {
        details["reason"] = "no ```python code block in the completion";
        result.details = dump(details);
        return result;
      }
      code = std::string(input.completion);
    }
    if (!prefix.prompt.empty() && code.find("def " + prefix.entry_point + "(") == std::string::npos)
      code = prefix.prompt + code;
    std::size_t passed = 0;
    json first_failure;
    double seconds = 0.0;
    for (std::size_t i = 0; i < tests.size(); ++i) {
      const TestCase& t = tests[i];
      RunResult r;
      bool ok = false;
      if (t.stdio) {
        r = sandbox_->run({"/code/solution.py"}, {{"/code/solution.py", code}}, t.input, limits_);
        ok = r.exited_cleanly() && same_output(r.out, t.expected_output);
      } else {
        const std::string token = random_token();
        r = sandbox_->run({"-c", kHarness}, {{"/code/solution.py", code}, {"/code/test.py", t.script}}, token + "\n",
                          limits_);
        const std::vector<std::string> lines = stripped_lines(r.out);
        ok = r.exited_cleanly() && !lines.empty() && lines.back() == token;
      }
      seconds += r.seconds;
      if (ok) {
        ++passed;
      } else if (first_failure.is_null()) {
        first_failure["test"] = i;
        if (!r.started) first_failure["error"] = r.error;
        // The memory limit first: a program it starved often runs into the clock as well.
        if (r.memory_limit) first_failure["killed"] = "memory limit";
        else if (r.timed_out) first_failure["killed"] = "wall-clock limit";
        else if (r.output_limit) first_failure["killed"] = "output limit";
        else if (r.signal) first_failure["killed"] = "signal " + std::to_string(r.signal);
        first_failure["exit_code"] = r.exit_code;
        if (r.memory_peak_bytes > 0) first_failure["memory_peak_mb"] = (r.memory_peak_bytes + (1u << 19)) >> 20;
        if (t.stdio) first_failure["stdout"] = sdk::clip_utf8(tail(r.out, kPreview), kPreview + 8);
        first_failure["stderr"] = sdk::clip_utf8(tail(r.err, kPreview), kPreview + 8);
      }
    }
    const double rate = static_cast<double>(passed) / static_cast<double>(tests.size());
    double score = rate;
    if (all_or_nothing_ && passed != tests.size()) score = 0.0;
    if (rate < pass_threshold_) score = 0.0;
    details["passed"] = passed;
    details["tests"] = tests.size();
    details["pass_rate"] = rate;
    details["seconds"] = seconds;
    if (!first_failure.is_null()) details["first_failure"] = first_failure;
    result.score = score;
    result.details = dump(details);
    return result;
  }

 private:
  // Says once per verifier what bounds a whole program here, or refuses to start without a
  // cgroup when the configuration requires one.
  void announce_bound(const sdk::ConfigView& cfg, bool require_cgroup) const {
    const CgroupSupport& cg = sandbox_->cgroup();
    const std::string mb = std::to_string(limits_.program_memory_bytes() >> 20);
    if (cg.kind != CgroupSupport::Kind::kNone) {
      sdk::log_info("code_exec: each program is bounded by its own " + std::string(grpo_sandbox::cgroup_kind_name(cg.kind)) +
                    " leaf: " + mb + " MB of memory with swap (memory_mb + tmp_mb + shm_mb) and " +
                    std::to_string(limits_.max_processes) + " processes (max_processes); " + cg.reason);
      return;
    }
    if (require_cgroup)
      cfg.fail("require_cgroup", "no cgroup can bound a sandboxed program's memory on this host: " + cg.reason +
                                     " (docs/sandbox.md, \"Memory bound\")");
    const std::uint64_t per_process_mb = limits_.memory_bytes >> 20;
    const std::uint64_t tmpfs_mb = (limits_.tmp_bytes + limits_.shm_bytes) >> 20;
    const std::uint64_t total_mb = per_process_mb * limits_.max_processes + tmpfs_mb;
    sdk::log_warn("code_exec: no cgroup bound on this host (" + cg.reason + "); a program is bounded only per process: " +
                  std::to_string(per_process_mb) + " MB of address space (memory_mb) x " +
                  std::to_string(limits_.max_processes) + " processes (max_processes) + " + std::to_string(tmpfs_mb) +
                  " MB of tmpfs (tmp_mb + shm_mb) = " + std::to_string(total_mb) +
                  " MB; set require_cgroup: true to refuse to start without a cgroup (docs/sandbox.md)");
  }

  static std::string random_token() {
    thread_local std::mt19937_64 rng(std::random_device{}());
    static const char* hex = "0123456789abcdef";
    std::string s = "grpo-pass-";
    for (int i = 0; i < 32; ++i) s += hex[rng() % 16];
    return s;
  }

  std::string python_, bwrap_;
  double pass_threshold_;
  bool all_or_nothing_, require_block_;
  std::size_t max_tests_;
  SandboxLimits limits_;
  std::unique_ptr<Sandbox> sandbox_;
};

}  // namespace

GRPO_PLUGIN("code_exec", "1.0.0", "runs Python completions against tests in a bubblewrap sandbox") {
  registrar.add_verifier<CodeVerifier>("code", "pass rate of the last ```python block on the ground truth's tests");
  registrar.add_verifier<CodeVerifier>("code_stdio", "the same verifier under open-instruct's stdin/stdout label");
}
