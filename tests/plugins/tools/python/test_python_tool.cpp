// The python tool, loaded through the PluginRegistry from the build's plugin folder the way a
// run loads it, in both modes: one-shot programs and one persistent interpreter per trajectory.
// The hostile-program suite mirrors the code verifier's (tests/plugins/verifiers/code_exec):
// containment is checked from the host's side (a file that must not appear, a listener that
// must get no connection, a secret that must not leak, processes that must not survive), and
// every hostile call must come back as an observation after which a normal call still works.
// Tests that need the sandbox skip where bubblewrap cannot create namespaces.
// Over 500 lines because it is the plugin's one suite (one executable per plugin, as for the
// verifiers): both modes, the stateful lifecycle and the hostile programs share its helpers.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/config/yaml_loader.h"
#include "tests/support/processes.h"
#include "grpo/sdk/config_value.h"
#include "grpo/sdk/tool.h"
#include "tests/support/build_plugins.h"

namespace {

namespace fs = std::filesystem;
using grpo::sdk::ConfigError;
using grpo::sdk::Tool;
using grpo::sdk::ToolObservation;
using json = nlohmann::json;
using Option = grpo::testing::PluginOption;

// Short limits keep the suite fast; the defaults are in the plugin's README.
std::shared_ptr<Tool> make(std::vector<Option> opts = {}) {
  for (Option o : {Option{"timeout_s", "2"}, Option{"memory_mb", "512"}, Option{"max_processes", "16"},
                   Option{"max_concurrency", "4"}})
    if (std::none_of(opts.begin(), opts.end(), [&](const Option& given) { return given.key == o.key; }))
      opts.push_back(o);
  return grpo::testing::create_component<Tool>("python", opts, "tools[0]");
}

// Why the sandbox cannot run here ("" when it can): the tool refuses to start without it.
const std::string& sandbox_unavailable() {
  static const std::string why = [] {
    try {
      make();
      return std::string();
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      if (what.find("sandbox does not work") != std::string::npos) return what;
      throw;
    }
  }();
  return why;
}

#define REQUIRE_SANDBOX()                                                                                \
  do {                                                                                                   \
    if (!sandbox_unavailable().empty())                                                                  \
      GTEST_SKIP() << "bubblewrap cannot create namespaces on this machine: " << sandbox_unavailable(); \
  } while (0)

const Tool& one_shot() {
  static const std::shared_ptr<Tool> tool = make();
  return *tool;
}

const Tool& stateful() {
  static const std::shared_ptr<Tool> tool = make({{"stateful", "true"}});
  return *tool;
}

ToolObservation run(const Tool& tool, const std::string& code, const std::string& trajectory = "t0",
                    double timeout_s = 0.0) {
  grpo::sdk::ToolCallContext context;
  context.trajectory_id = trajectory;
  context.timeout_s = timeout_s;
  context.metadata = "{}";
  return tool.call(json{{"code", code}}.dump(), context);
}

json details(const ToolObservation& obs) { return json::parse(obs.details); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

using grpo::testing::marker_process_appears;
using grpo::testing::marker_process_gone;
using grpo::testing::unique;

// After a hostile call: the tool still answers a normal one (in the same trajectory: a
// stateful tool restarts the interpreter it killed).
void expect_still_works(const Tool& tool, const std::string& trajectory = "t0") {
  const ToolObservation obs = run(tool, "print(6 * 7)", trajectory);
  EXPECT_FALSE(obs.is_error) << obs.text;
  EXPECT_NE(obs.text.find("42\n"), std::string::npos) << obs.text;
}

// ---- one-shot programs ----------------------------------------------------------------------

TEST(PythonTool, DescribesItselfWithARequiredCode) {
  REQUIRE_SANDBOX();
  const json schema = json::parse(one_shot().parameters());
  EXPECT_EQ(schema["properties"]["code"]["type"], "string");
  EXPECT_EQ(schema["required"], json::array({"code"}));
  EXPECT_NE(one_shot().description().find("fresh program"), std::string::npos);
  EXPECT_NE(stateful().description().find("persist"), std::string::npos);
}

TEST(PythonTool, StdoutIsTheObservation) {
  REQUIRE_SANDBOX();
  const ToolObservation obs = run(one_shot(), "print(48213 * 572)");
  EXPECT_FALSE(obs.is_error) << obs.text;
  EXPECT_EQ(obs.text, "27577836\n");
  const json d = details(obs);
  EXPECT_EQ(d["exit_code"], 0);
  EXPECT_EQ(d["timed_out"], false);
  EXPECT_EQ(d["truncated"], false);
}

TEST(PythonTool, StderrFollowsStdout) {
  REQUIRE_SANDBOX();
  const ToolObservation obs = run(one_shot(), "import sys\nprint('out')\nprint('err', file=sys.stderr)");
  EXPECT_FALSE(obs.is_error) << obs.text;  // exit status 0: stderr alone is no error
  EXPECT_EQ(obs.text, "out\nerr\n");
}

TEST(PythonTool, NoOutputSaysSo) {
  REQUIRE_SANDBOX();
  const ToolObservation obs = run(one_shot(), "x = 1");
  EXPECT_FALSE(obs.is_error);
  EXPECT_EQ(obs.text, "(no output)");
}

TEST(PythonTool, ExceptionsAndExitStatusesAreErrors) {
  REQUIRE_SANDBOX();
  const ToolObservation raised = run(one_shot(), "print('before')\n1 / 0");
  EXPECT_TRUE(raised.is_error);
  EXPECT_EQ(raised.text.rfind("before\n", 0), 0u) << raised.text;
  EXPECT_NE(raised.text.find("ZeroDivisionError: division by zero"), std::string::npos) << raised.text;
  EXPECT_EQ(details(raised)["exit_code"], 1);

  const ToolObservation exited = run(one_shot(), "import sys\nsys.exit(3)");
  EXPECT_TRUE(exited.is_error);
  EXPECT_EQ(exited.text, "[Exit status 3]");
  EXPECT_EQ(details(exited)["exit_code"], 3);

  const ToolObservation syntax = run(one_shot(), "def f(:\n  pass");
  EXPECT_TRUE(syntax.is_error);
  EXPECT_NE(syntax.text.find("SyntaxError"), std::string::npos) << syntax.text;
}

TEST(PythonTool, EachStreamIsCutAtMaxOutputChars) {
  REQUIRE_SANDBOX();
  const std::shared_ptr<Tool> tool = make({{"max_output_chars", "10"}});
  // 25 'a' + '\n' = 26 characters: 10 kept, 16 cut.
  const ToolObservation out = run(*tool, "print('a' * 25)");
  EXPECT_FALSE(out.is_error);
  EXPECT_EQ(out.text, "aaaaaaaaaa... [truncated 16 chars]");
  EXPECT_EQ(details(out)["stdout_chars"], 26);
  EXPECT_EQ(details(out)["truncated"], true);
  // Characters, not bytes: 12 'é' + '\n' = 13 characters (25 bytes).
  EXPECT_EQ(run(*tool, "print('\u00e9' * 12)").text,
            "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9... [truncated 3 chars]");
  // Both streams, each on its own: stdout keeps its beginning, stderr its end.
  const ToolObservation both = run(*tool, "import sys\nprint('o' * 20)\nsys.stderr.write('a' * 20 + 'b' * 10)");
  EXPECT_EQ(both.text, "oooooooooo... [truncated 11 chars]\n[truncated 20 chars] ...bbbbbbbbbb");
  // A traceback's last line survives a flood of stderr before it.
  const std::shared_ptr<Tool> wider = make({{"max_output_chars", "100"}});
  const ToolObservation raised = run(*wider, "import sys\nsys.stderr.write('e' * 5000)\n1 / 0");
  EXPECT_TRUE(raised.is_error);
  EXPECT_NE(raised.text.find("ZeroDivisionError: division by zero\n"), std::string::npos) << raised.text;
}

TEST(PythonTool, TimeOutIsAnErrorWithinABoundedTime) {
  REQUIRE_SANDBOX();
  const std::shared_ptr<Tool> tool = make({{"timeout_s", "1"}});
  auto t0 = std::chrono::steady_clock::now();
  const ToolObservation obs = run(*tool, "print('started', flush=True)\nwhile True:\n    pass");
  EXPECT_LT(seconds_since(t0), 10.0);  // killed near the 1 s limit, not a speed check
  EXPECT_TRUE(obs.is_error);
  EXPECT_NE(obs.text.find("started\n"), std::string::npos) << obs.text;  // what it printed is kept
  EXPECT_NE(obs.text.find("[Timed out after 1 s]"), std::string::npos) << obs.text;
  EXPECT_EQ(details(obs)["timed_out"], true);
  // The call's own limit wins when it is smaller.
  const std::shared_ptr<Tool> patient = make({{"timeout_s", "30"}});
  t0 = std::chrono::steady_clock::now();
  const ToolObservation limited = run(*patient, "import time\ntime.sleep(60)", "t0", 1.0);
  EXPECT_LT(seconds_since(t0), 10.0);
  EXPECT_NE(limited.text.find("[Timed out after 1 s]"), std::string::npos) << limited.text;
  expect_still_works(*tool);
}

TEST(PythonTool, BadArgumentsAreAnErrorObservation) {
  REQUIRE_SANDBOX();
  grpo::sdk::ToolCallContext context;
  for (const std::string& args : {std::string("{}"), std::string("{\"code\": 1}"), std::string("[")}) {
    const ToolObservation obs = one_shot().call(args, context);
    EXPECT_TRUE(obs.is_error) << args;
    EXPECT_NE(obs.text.find("code"), std::string::npos) << obs.text;
  }
}

TEST(PythonTool, OptionsAreValidatedAndABrokenSandboxIsAConfigError) {
  EXPECT_THROW(make({{"timeout_s", "0"}}), ConfigError);
  EXPECT_THROW(make({{"max_output_chars", "0"}}), ConfigError);
  EXPECT_THROW(make({{"max_interpreters", "0"}}), ConfigError);
  EXPECT_THROW(make({{"network", "true"}}), ConfigError);  // never offered: unknown option
  try {
    make({{"bwrap", "/nonexistent/bwrap"}});
    ADD_FAILURE() << "a missing bubblewrap must be an error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("bwrap"), std::string::npos) << e.what();
  }
}

// A missing interpreter is the `python` option's fault, reported at its file:line, not the
// sandbox's (`bwrap`).
TEST(PythonTool, AMissingPythonIsReportedUnderItsOwnKey) {
  REQUIRE_SANDBOX();
  const grpo::sdk::ConfigValue config =
      grpo::core::parse_yaml("tools:\n  - name: python\n    python: /nonexistent/python3\n", "tools.yaml");
  const grpo::sdk::ConfigValue& node = config.find("tools")->items().at(0);
  try {
    grpo::testing::build_plugin_registry().create<Tool>("python", &node, "tools[0]",
                                                        grpo::core::PluginRegistry::tool_host_keys());
    ADD_FAILURE() << "a missing interpreter must be an error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("tools.yaml:3:", 0), 0u) << what;
    EXPECT_NE(what.find("tools[0].python: no executable Python interpreter at /nonexistent/python3"), std::string::npos)
        << what;
    EXPECT_EQ(what.find("bwrap"), std::string::npos) << what;
  }
}

// ---- stateful: one interpreter per trajectory ---------------------------------------------

TEST(PythonToolStateful, VariablesPersistWithinATrajectoryOnly) {
  REQUIRE_SANDBOX();
  const Tool& tool = stateful();
  const std::string a = unique("a"), b = unique("b");
  const ToolObservation first = run(tool, "x = 41\ndef f(v):\n    return v + 1", a);
  EXPECT_FALSE(first.is_error) << first.text;
  EXPECT_EQ(first.text, "(no output)");
  EXPECT_EQ(details(first)["interpreter"], "new");
  const ToolObservation second = run(tool, "print(f(x))", a);
  EXPECT_FALSE(second.is_error) << second.text;
  EXPECT_EQ(second.text, "42\n");
  EXPECT_EQ(details(second)["interpreter"], "kept");
  // Another trajectory has its own namespace.
  const ToolObservation other = run(tool, "print(x)", b);
  EXPECT_TRUE(other.is_error);
  EXPECT_NE(other.text.find("NameError: name 'x' is not defined"), std::string::npos) << other.text;
  // An exception does not end the interpreter; the traceback shows the cell's line.
  const ToolObservation raised = run(tool, "y = 1\nraise ValueError('bad value')", a);
  EXPECT_TRUE(raised.is_error);
  EXPECT_NE(raised.text.find("raise ValueError('bad value')"), std::string::npos) << raised.text;
  EXPECT_NE(raised.text.find("ValueError: bad value"), std::string::npos) << raised.text;
  EXPECT_EQ(run(tool, "print(x, y)", a).text, "41 1\n");
  // After end_trajectory, the same id starts from nothing (and no loss is reported: it ended).
  tool.end_trajectory(a);
  const ToolObservation after_end = run(tool, "print(x)", a);
  EXPECT_NE(after_end.text.find("NameError"), std::string::npos) << after_end.text;
  EXPECT_EQ(after_end.text.find("new Python interpreter"), std::string::npos) << after_end.text;
  tool.end_trajectory(a);
  tool.end_trajectory(b);
}

TEST(PythonToolStateful, StdoutStderrAndExitStatusPerCell) {
  REQUIRE_SANDBOX();
  const Tool& tool = stateful();
  const std::string t = unique("cells");
  // Each cell's output only, also what child processes and os.write print.
  EXPECT_EQ(run(tool, "print('one')", t).text, "one\n");
  EXPECT_EQ(run(tool, "import os, subprocess, sys\nos.write(1, b'raw\\n')\n"
                      "subprocess.run([sys.executable, '-c', 'print(\"child\")'])",
                t)
                .text,
            "raw\nchild\n");
  EXPECT_EQ(run(tool, "import sys\nprint('o')\nprint('e', file=sys.stderr)", t).text, "o\ne\n");
  const ToolObservation exited = run(tool, "z = 7\nimport sys\nsys.exit(4)", t);
  EXPECT_TRUE(exited.is_error);
  EXPECT_EQ(exited.text, "[Exit status 4]");
  EXPECT_EQ(run(tool, "print(z)", t).text, "7\n");  // sys.exit ends the cell, not the interpreter
  const ToolObservation no_input = run(tool, "input()", t);
  EXPECT_NE(no_input.text.find("EOFError"), std::string::npos) << no_input.text;
  tool.end_trajectory(t);
}

TEST(PythonToolStateful, OutputIsCutPerStream) {
  REQUIRE_SANDBOX();
  const std::shared_ptr<Tool> tool = make({{"stateful", "true"}, {"max_output_chars", "10"}});
  EXPECT_EQ(run(*tool, "print('a' * 25)").text, "aaaaaaaaaa... [truncated 16 chars]");
  EXPECT_EQ(run(*tool, "import sys\nprint('o' * 20)\nsys.stderr.write('a' * 20 + 'b' * 10)").text,
            "oooooooooo... [truncated 11 chars]\n[truncated 20 chars] ...bbbbbbbbbb");
  const std::shared_ptr<Tool> wider = make({{"stateful", "true"}, {"max_output_chars", "100"}});
  const ToolObservation raised = run(*wider, "import sys\nsys.stderr.write('e' * 5000)\n1 / 0");
  EXPECT_TRUE(raised.is_error);
  EXPECT_NE(raised.text.find("ZeroDivisionError: division by zero\n"), std::string::npos) << raised.text;
  EXPECT_EQ(details(raised)["stderr_chars"].get<int>() > 5000, true);
}

TEST(PythonToolStateful, ATimeOutLosesTheStateAndTheNextCallSaysSo) {
  REQUIRE_SANDBOX();
  const Tool& tool = stateful();
  const std::string t = unique("timeout");
  ASSERT_FALSE(run(tool, "kept = 5", t).is_error);
  const auto t0 = std::chrono::steady_clock::now();
  const ToolObservation timed_out = run(tool, "while True:\n    pass", t, 1.0);
  EXPECT_LT(seconds_since(t0), 10.0);
  EXPECT_TRUE(timed_out.is_error);
  EXPECT_NE(timed_out.text.find("Timed out after 1 s; the interpreter was stopped and its variables are lost"),
            std::string::npos)
      << timed_out.text;
  const ToolObservation next = run(tool, "print(kept)", t);
  EXPECT_EQ(next.text.rfind("[A new Python interpreter was started: the variables of earlier calls are lost", 0), 0u)
      << next.text;
  EXPECT_NE(next.text.find("timed out"), std::string::npos) << next.text;
  EXPECT_NE(next.text.find("NameError"), std::string::npos) << next.text;
  EXPECT_EQ(details(next)["interpreter"], "new");
  EXPECT_EQ(run(tool, "print('fine')", t).text, "fine\n");  // told once
  tool.end_trajectory(t);
}

TEST(PythonToolStateful, ACrashLosesTheStateAndTheNextCallSaysSo) {
  REQUIRE_SANDBOX();
  const Tool& tool = stateful();
  const std::string t = unique("crash");
  ASSERT_FALSE(run(tool, "kept = 5", t).is_error);
  const ToolObservation crashed = run(tool, "import os\nos._exit(3)", t);
  EXPECT_TRUE(crashed.is_error);
  EXPECT_NE(crashed.text.find("exited with status 3"), std::string::npos) << crashed.text;
  const ToolObservation next = run(tool, "print('kept' in globals())", t);
  EXPECT_NE(next.text.find("new Python interpreter was started"), std::string::npos) << next.text;
  EXPECT_NE(next.text.find("False\n"), std::string::npos) << next.text;
  tool.end_trajectory(t);
}

// A cell that writes into the interpreter's protocol channel (a local of the driver's) is
// stopped once one line passes the longest answer there can be: the host holds no more than
// that, the state is lost, and the next call gets a fresh interpreter.
TEST(PythonToolStateful, AFloodOfTheProtocolChannelLosesTheInterpreterNotTheHost) {
  REQUIRE_SANDBOX();
  const Tool& tool = stateful();
  const std::string t = unique("flood");
  const ToolObservation obs =
      run(tool,
          "import inspect, os\n"
          "fd = next(f.frame.f_locals['proto'] for f in inspect.stack() if 'proto' in f.frame.f_locals)\n"
          "for _ in range(200):\n"
          "    os.write(fd, b'y' * (1 << 20))\n",
          t, 20.0);
  EXPECT_TRUE(obs.is_error);
  // max_output_chars 1000: an answer is at most 2 x 6 x 1000 + 4096 bytes.
  EXPECT_NE(obs.text.find("[The Python interpreter wrote more than 16096 bytes on one line of its protocol channel; "
                          "its variables are lost]"),
            std::string::npos)
      << obs.text.substr(0, 300);
  EXPECT_EQ(details(obs)["interpreter"], "lost");
  expect_still_works(tool, t);
  tool.end_trajectory(t);
}

TEST(PythonToolStateful, EndTrajectoryKillsTheInterpreterAndWhatItStarted) {
  REQUIRE_SANDBOX();
  const Tool& tool = stateful();
  const std::string t = unique("end"), marker = unique("GRPO_TOOL_MARKER_");
  const ToolObservation started =
      run(tool, "import subprocess, sys\nchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '" +
                    marker + "'])\nprint('started')",
          t);
  ASSERT_FALSE(started.is_error) << started.text;
  EXPECT_TRUE(marker_process_appears(marker)) << "the interpreter's child should run until the trajectory ends";
  EXPECT_FALSE(run(tool, "print(child.poll())", t).is_error);  // alive between calls
  tool.end_trajectory(t);
  EXPECT_TRUE(marker_process_gone(marker)) << "end_trajectory left the interpreter's processes running";
}

TEST(PythonToolStateful, TheLeastRecentlyUsedInterpreterIsEvictedPastTheCap) {
  REQUIRE_SANDBOX();
  const std::shared_ptr<Tool> tool = make({{"stateful", "true"}, {"max_interpreters", "2"}});
  ASSERT_FALSE(run(*tool, "a = 1", "A").is_error);
  ASSERT_FALSE(run(*tool, "b = 2", "B").is_error);
  ASSERT_FALSE(run(*tool, "print(a)", "A").is_error);  // A is now more recent than B
  ASSERT_FALSE(run(*tool, "c = 3", "C").is_error);     // evicts B
  EXPECT_EQ(run(*tool, "print(a)", "A").text, "1\n");
  const ToolObservation b = run(*tool, "print('b' in globals())", "B");
  EXPECT_NE(b.text.find("make room for another trajectory's (max_interpreters: 2)"), std::string::npos) << b.text;
  EXPECT_NE(b.text.find("False\n"), std::string::npos) << b.text;
  for (const char* t : {"A", "B", "C"}) tool->end_trajectory(t);
}

// An evicted interpreter's stderr (a partial line, the tail kept for start-up errors) goes with
// it: a failed start of the trajectory's next interpreter reports its own stderr only. bubblewrap
// wrapped in a script writes that stderr: noise at a start, or, once a flag file exists, a failure.
TEST(PythonToolStateful, AnEvictedInterpretersStderrDoesNotReachTheNextOne) {
  REQUIRE_SANDBOX();
  const fs::path dir = fs::temp_directory_path() / unique("grpo_python_tool_bwrap");
  fs::create_directories(dir);
  const fs::path wrapper = dir / "bwrap", flag = dir / "fail";
  std::ofstream(wrapper) << "#!/bin/sh\nif [ -e '" << flag.string() << "' ]; then echo 'start failed' >&2; exit 3; fi\n"
                         << "printf 'old line\\nold partial' >&2\nexec /usr/bin/bwrap \"$@\"\n";
  // Run as the sandbox's own user, not this one.
  fs::permissions(wrapper, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                               fs::perms::others_read | fs::perms::others_exec);
  const std::shared_ptr<Tool> tool =
      make({{"stateful", "true"}, {"max_interpreters", "1"}, {"bwrap", wrapper.string()}});
  ASSERT_FALSE(run(*tool, "a = 1", "A").is_error);
  ASSERT_FALSE(run(*tool, "b = 2", "B").is_error);  // evicts A's interpreter
  std::ofstream(flag) << "";
  const ToolObservation a = run(*tool, "print(a)", "A");
  EXPECT_TRUE(a.is_error);
  EXPECT_NE(a.text.find("the interpreter exited while starting: start failed"), std::string::npos) << a.text;
  EXPECT_EQ(a.text.find("old"), std::string::npos) << a.text;
  for (const char* t : {"A", "B"}) tool->end_trajectory(t);
  fs::remove_all(dir);
}

TEST(PythonToolStateful, ManyTrajectoriesAtOnceKeepTheirOwnState) {
  REQUIRE_SANDBOX();
  const Tool& tool = stateful();
  constexpr int kTrajectories = 8;
  std::vector<std::string> seen(kTrajectories);
  std::vector<std::thread> threads;
  const std::string stem = unique("concurrent");
  for (int i = 0; i < kTrajectories; ++i)
    threads.emplace_back([&, i] {
      const std::string t = stem + std::to_string(i);
      run(tool, "v = " + std::to_string(i * 11), t);
      run(tool, "v += 1", t);
      seen[i] = run(tool, "print(v)", t).text;
      tool.end_trajectory(t);
    });
  for (auto& th : threads) th.join();
  for (int i = 0; i < kTrajectories; ++i) EXPECT_EQ(seen[i], std::to_string(i * 11 + 1) + "\n") << i;
}

// ---- hostile programs, in both modes -------------------------------------------------------

class PythonToolSandbox : public ::testing::TestWithParam<bool> {
 protected:
  const Tool& tool() const { return GetParam() ? stateful() : one_shot(); }
  std::string trajectory() const { return unique("hostile"); }
};

INSTANTIATE_TEST_SUITE_P(Modes, PythonToolSandbox, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Stateful" : "OneShot"; });

TEST_P(PythonToolSandbox, ForkBombIsContained) {
  REQUIRE_SANDBOX();
  const std::string t = trajectory();
  // Forking until refused gets at most max_processes (16) processes.
  const ToolObservation counted =
      run(tool(),
          "import os, sys, time\nn = 0\ntry:\n    while n < 10000:\n        if os.fork() == 0:\n"
          "            time.sleep(3)\n            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint('forked=%d' % n)",
          t);
  const std::size_t at = counted.text.find("forked=");
  ASSERT_NE(at, std::string::npos) << counted.text;
  EXPECT_LT(std::stoi(counted.text.substr(at + 7)), 16) << counted.text;
  // A real fork bomb: stopped at the time limit, and the host can still start processes.
  const auto t0 = std::chrono::steady_clock::now();
  const ToolObservation bomb =
      run(tool(), "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", t, 1.0);
  EXPECT_LT(seconds_since(t0), 15.0);
  EXPECT_TRUE(bomb.is_error) << bomb.text;
  EXPECT_EQ(std::system("true"), 0);
  expect_still_works(tool(), t);
  tool().end_trajectory(t);
}

TEST_P(PythonToolSandbox, NoNetworkToLoopbackOrOutside) {
  REQUIRE_SANDBOX();
  const std::string t = trajectory();
  const int server = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(server, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(server, 4), 0);
  socklen_t len = sizeof addr;
  getsockname(server, reinterpret_cast<sockaddr*>(&addr), &len);
  for (const std::string& target : {"('127.0.0.1', " + std::to_string(ntohs(addr.sin_port)) + ")", std::string("('1.1.1.1', 53)")}) {
    const ToolObservation obs =
        run(tool(), "import socket\ns = socket.create_connection(" + target + ", timeout=1)\ns.sendall(b'x')\nprint('connected')", t);
    EXPECT_TRUE(obs.is_error) << target << ": " << obs.text;
    EXPECT_EQ(obs.text.find("connected"), std::string::npos) << obs.text;
  }
  pollfd p{server, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 100), 0) << "the host listener got a connection from the sandbox";
  close(server);
  expect_still_works(tool(), t);
  tool().end_trajectory(t);
}

TEST_P(PythonToolSandbox, WritesOutsideItsTmpNeverReachTheHost) {
  REQUIRE_SANDBOX();
  const std::string t = trajectory();
  const fs::path in_project = fs::path(GRPO_SOURCE_DIR) / unique("grpo_tool_probe_");
  const fs::path in_tmp = fs::temp_directory_path() / unique("grpo_tool_probe_");
  for (const fs::path& target : {in_project, in_tmp}) {
    const ToolObservation obs = run(tool(),
                                    "import os\nos.makedirs(os.path.dirname('" + target.string() +
                                        "'), exist_ok=True)\nopen('" + target.string() + "', 'w').write('pwned')\nprint('wrote')",
                                    t);
    EXPECT_FALSE(fs::exists(target)) << target << ": " << obs.text;
  }
  expect_still_works(tool(), t);
  tool().end_trajectory(t);
}

TEST_P(PythonToolSandbox, HostSecretsAreNotReadable) {
  REQUIRE_SANDBOX();
  const std::string t = trajectory();
  const fs::path dir = fs::temp_directory_path() / unique("grpo_tool_secret_");
  fs::create_directories(dir);
  const std::string secret = "SECRET-" + unique("");
  std::ofstream(dir / "id_rsa") << secret;
  fs::permissions(dir, fs::perms::all, fs::perm_options::add);
  fs::permissions(dir / "id_rsa", fs::perms::others_read, fs::perm_options::add);
  for (const std::string& path : {(dir / "id_rsa").string(), std::string("/etc/shadow"), std::string("/etc/passwd"),
                                  std::string(GRPO_SOURCE_DIR) + "/CMakeLists.txt"}) {
    const ToolObservation obs = run(tool(), "print(open('" + path + "').read())", t);
    EXPECT_TRUE(obs.is_error) << path << ": " << obs.text;
    EXPECT_NE(obs.text.find("FileNotFoundError"), std::string::npos) << path << ": " << obs.text;
    EXPECT_EQ(obs.text.find(secret), std::string::npos);
  }
  fs::remove_all(dir);
  expect_still_works(tool(), t);
  tool().end_trajectory(t);
}

TEST_P(PythonToolSandbox, HundredMegabytesOfOutputComeBackCut) {
  REQUIRE_SANDBOX();
  const std::string t = trajectory();
  const auto t0 = std::chrono::steady_clock::now();
  const ToolObservation obs =
      run(tool(), "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 1000000)\nprint('done')", t, 10.0);
  EXPECT_LT(seconds_since(t0), 15.0);
  EXPECT_TRUE(obs.is_error) << obs.text.substr(0, 300);  // stopped (one-shot) or out of room in /tmp (stateful)
  EXPECT_EQ(obs.text.rfind(std::string(1000, 'x') + "... [truncated ", 0), 0u) << obs.text.substr(0, 1100);
  EXPECT_LT(obs.text.size(), 4096u);
  EXPECT_EQ(obs.text.find("done"), std::string::npos);
  EXPECT_EQ(details(obs)["truncated"], true);
  expect_still_works(tool(), t);
  tool().end_trajectory(t);
}

TEST_P(PythonToolSandbox, BackgroundChildrenDieWithTheProgram) {
  REQUIRE_SANDBOX();
  const std::string t = trajectory(), marker = unique("GRPO_TOOL_BACKGROUND_");
  run(tool(),
      "import os, sys\nif os.fork() == 0:\n    os.setsid()\n    os.execv(sys.executable, [sys.executable, '-c', "
      "'import time; time.sleep(30)', '" + marker + "'])\nprint('parent')",
      t);
  tool().end_trajectory(t);  // a stateful interpreter keeps its children until the trajectory ends
  EXPECT_TRUE(marker_process_gone(marker)) << "a background child outlived its sandbox";
  expect_still_works(tool(), t);
  tool().end_trajectory(t);
}

}  // namespace
