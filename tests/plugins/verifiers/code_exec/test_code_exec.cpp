// The code / code_stdio verifier and its sandbox, loaded the way a run loads them. The
// hostile-program suite checks containment from the host's side (files that must not appear,
// a listener that must get no connection, a secret that must not leak, processes that must
// not survive) and that the verifier keeps working afterwards. HumanEval's canonical
// solutions check that correct code scores 1 (tests/fixtures/verifiers/code_exec/README.md).
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/config/yaml_loader.h"
#include "tests/support/build_plugins.h"
#include "tests/support/processes.h"
#include "code_exec_test_util.h"
#include "grpo/sdk/config_value.h"
#include "grpo/sdk/verifier.h"

namespace {

namespace fs = std::filesystem;
using grpo::sdk::ConfigError;
using grpo::sdk::Verifier;
using grpo::sdk::VerifierInput;
using grpo::sdk::VerifierResult;
using json = nlohmann::json;
using grpo_code_test::details;
using grpo_code_test::expect_pool_still_works;
using grpo_code_test::kNeedsOk;
using grpo_code_test::make;
using grpo_code_test::run;

const std::shared_ptr<Verifier>& shared_verifier() {
  static const std::shared_ptr<Verifier> v = make();
  return v;
}

using grpo::testing::marker_process_gone;
using grpo::testing::unique;


// ---- scoring -------------------------------------------------------------------------------

TEST(CodeExecVerifier, AssertTestsScoreThePassRate) {
  const Verifier& v = *shared_verifier();
  const std::string code = "def add(a, b):\n    return a + b if a < 10 else 0";
  const json asserts = {"assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(20, 1) == 21"};
  VerifierResult r = run(v, code, asserts);
  EXPECT_NEAR(r.score, 2.0 / 3.0, 1e-12) << r.details;  // the third assert fails
  EXPECT_EQ(details(r)["passed"], 2);
  EXPECT_EQ(details(r)["first_failure"]["test"], 2);
  EXPECT_NE(details(r)["first_failure"]["stderr"].get<std::string>().find("AssertionError"), std::string::npos);
  // all_or_nothing and pass_threshold
  EXPECT_EQ(run(*make({{"all_or_nothing", "true"}}), code, asserts).score, 0.0);
  EXPECT_EQ(run(*make({{"pass_threshold", "0.9"}}), code, asserts).score, 0.0);
  // MBPP form with setup code; HumanEval form with check(entry_point)
  EXPECT_EQ(run(v, "def sq(x):\n    return math.sqrt(x)",
                {{"test_list", {"assert sq(4) == 2"}}, {"test_setup_code", "import math"}})
                .score,
            1.0);
  EXPECT_EQ(run(v, "def inc(x):\n    return x + 1",
                {{"test", "def check(candidate):\n    assert candidate(1) == 2\n"}, {"entry_point", "inc"}})
                .score,
            1.0);
  // HumanEval with the prompt: a block holding only the body runs as prompt + body; a block
  // defining the function runs as it is
  const json with_prompt = {{"prompt", "def inc(x):\n    \"\"\"x + 1\"\"\"\n"},
                            {"test", "def check(candidate):\n    assert candidate(1) == 2\n"},
                            {"entry_point", "inc"}};
  EXPECT_EQ(run(v, "    return x + 1", with_prompt).score, 1.0);
  EXPECT_EQ(run(v, "    return x", with_prompt).score, 0.0);
  EXPECT_EQ(run(v, "def inc(y):\n    return y + 1", with_prompt).score, 1.0);
  // open-instruct stores the list as a JSON string
  EXPECT_EQ(run(v, code, json("[\"assert add(1, 1) == 2\"]")).score, 1.0);
}

TEST(CodeExecVerifier, StdioTestsCompareStrippedLines) {
  const Verifier& v = *shared_verifier();
  const std::string code = "n = int(input())\nprint(n * 2)\nprint('  done  ')";
  const json gt = {{"inputs", {"3\n", "5\n", "7\n"}}, {"outputs", {"6\ndone\n", "10\ndone", "15\ndone\n"}}};
  const VerifierResult r = run(v, code, gt);
  EXPECT_NEAR(r.score, 2.0 / 3.0, 1e-12) << r.details;
  EXPECT_EQ(details(r)["first_failure"]["test"], 2);
  // open-instruct's form, a list of {input, output}; lines also match as decimal numbers
  // (grade_stdio: "2.50" == "2.5", "1e2" == "100"), never as other text
  const std::string half = "a, b = map(float, input().split())\nprint()\nprint(a / b, ' ', a * b)";
  EXPECT_EQ(run(v, half, json::array({{{"input", "5 2\n"}, {"output", "2.50 1e1"}},
                                      {{"input", "1 4\n"}, {"output", "\n0.25   4.0\n\n"}},
                                      {{"input", "1 1\n"}, {"output", "1.0 one"}},
                                      {{"input", "1 2\n"}, {"output", "0.5"}}}))
                .score,
            0.5);
  // APPS-style input_output string
  EXPECT_EQ(run(v, code, {{"input_output", json({{"inputs", {"1\n"}}, {"outputs", {"2\ndone\n"}}}).dump()}}).score, 1.0);
}

TEST(CodeExecVerifier, ExitingBeforeTheTestsDoesNotPass) {
  const Verifier& v = *shared_verifier();
  // exit(0) / os._exit(0) before the asserts run: exit status 0 but no pass token
  for (const char* code : {"import os\nos._exit(0)", "import sys\nsys.exit(0)", "raise SystemExit"}) {
    const VerifierResult r = run(v, code, json::array({"assert False"}));
    EXPECT_EQ(r.score, 0.0) << code << ": " << r.details;
  }
  // printing a fake token does not help either
  EXPECT_EQ(run(v, "print('grpo-pass-0000')\nimport os\nos._exit(0)", json::array({"assert False"})).score, 0.0);
}

TEST(CodeExecVerifier, CompletionsAndGroundTruthsThatAreNotTests) {
  const Verifier& v = *shared_verifier();
  VerifierInput in;
  in.completion = "def f(): return 1";  // no fenced block
  const std::string gt = R"(["assert f() == 1"])";
  in.ground_truth = gt;
  VerifierResult r = v.verify(in);
  EXPECT_EQ(r.score, 0.0);
  EXPECT_NE(details(r)["reason"].get<std::string>().find("no ```python code block"), std::string::npos);
  // the last block is the answer
  in.completion = "```python\ndef f(): return 0\n```\nfixed:\n```python\ndef f(): return 1\n```";
  EXPECT_EQ(v.verify(in).score, 1.0);
  for (const json& bad : {json(nullptr), json(42), json::object(), json::array({1, 2}),
                          json({{"inputs", {"1"}}, {"outputs", json::array()}})}) {
    r = run(v, "x = 1", bad);
    EXPECT_EQ(r.score, 0.0) << bad;
    EXPECT_FALSE(details(r).value("reason", std::string()).empty()) << bad << r.details;
  }
}

TEST(CodeExecVerifier, OptionsAreValidatedAndABrokenSandboxIsAConfigError) {
  EXPECT_THROW(make({{"timeout_s", "0"}}), ConfigError);
  EXPECT_THROW(make({{"pass_threshold", "2"}}), ConfigError);
  EXPECT_THROW(make({{"max_concurrency", "100000"}}), ConfigError);
  try {
    grpo::testing::create_component<Verifier>("code", {{"bwrap", "/nonexistent/bwrap"}}, "verifiers[0]");
    ADD_FAILURE() << "a missing bubblewrap must be an error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("bwrap"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sandbox does not work"), std::string::npos) << e.what();
  }
}

// A missing interpreter is the `python` option's fault, reported at its file:line, not the
// sandbox's (`bwrap`).
TEST(CodeExecVerifier, AMissingPythonIsReportedUnderItsOwnKey) {
  const grpo::sdk::ConfigValue config =
      grpo::core::parse_yaml("verifiers:\n  - name: code\n    python: /nonexistent/python3\n", "run.yaml");
  const grpo::sdk::ConfigValue& node = config.find("verifiers")->items().at(0);
  try {
    grpo::testing::build_plugin_registry().create_verifier("code", &node, "verifiers[0]");
    ADD_FAILURE() << "a missing interpreter must be an error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("run.yaml:3:", 0), 0u) << what;
    EXPECT_NE(what.find("verifiers[0].python: no executable Python interpreter at /nonexistent/python3"),
              std::string::npos)
        << what;
    EXPECT_EQ(what.find("bwrap"), std::string::npos) << what;
  }
}

// ---- hostile programs ----------------------------------------------------------------------

// A 1 s limit for the programs that run until killed.
const std::shared_ptr<Verifier>& short_verifier() {
  static const std::shared_ptr<Verifier> v = make({{"timeout_s", "1"}});
  return v;
}

TEST(CodeExecSandbox, InfiniteLoopIsKilledAtTheWallClockLimit) {
  const Verifier& v = *short_verifier();
  const auto t0 = std::chrono::steady_clock::now();
  const VerifierResult r = run(v, "while True:\n    pass\nok = True", kNeedsOk);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.score, 0.0);
  EXPECT_LT(s, 10.0);  // killed near the 1 s limit, not a speed check
  const json f = details(r)["first_failure"];
  EXPECT_TRUE(f.contains("killed") || f.value("exit_code", 0) != 0) << r.details;
  expect_pool_still_works(v);
}

TEST(CodeExecSandbox, ForkBombIsContained) {
  const Verifier& v = *short_verifier();
  // The process limit holds (also as root, where the kernel exempts uid 0 from RLIMIT_NPROC):
  // forking until refused gets at most max_processes (16) children.
  const VerifierResult counted = run(v,
                                     "import os, sys, time\nn = 0\ntry:\n    while n < 10000:\n"
                                     "        if os.fork() == 0:\n            time.sleep(3)\n            os._exit(0)\n"
                                     "        n += 1\nexcept OSError:\n    pass\nsys.stderr.write('forked=%d' % n)\nok = False",
                                     kNeedsOk);
  const std::string err = details(counted)["first_failure"]["stderr"].get<std::string>();
  const std::size_t at = err.find("forked=");
  ASSERT_NE(at, std::string::npos) << counted.details;
  EXPECT_LT(std::stoi(err.substr(at + 7)), 16) << counted.details;
  std::printf("fork until refused: %s (max_processes 16)\n", err.substr(at).c_str());
  // A real fork bomb, while a normal program runs in the other slot: the bomb scores 0, the
  // normal program is not starved of processes, the host can still start processes.
  VerifierResult bomb;
  std::thread t([&] {
    bomb = run(v, "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\nok = True",
               kNeedsOk);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  expect_pool_still_works(v);
  EXPECT_EQ(system("true"), 0);
  t.join();
  EXPECT_EQ(bomb.score, 0.0) << bomb.details;
  expect_pool_still_works(v);
}

TEST(CodeExecSandbox, HugeAllocationFails) {
  const Verifier& v = *shared_verifier();
  const VerifierResult r = run(v, "x = bytearray(10 * 1024 ** 3)\nok = True", kNeedsOk);
  EXPECT_EQ(r.score, 0.0);
  EXPECT_NE(details(r)["first_failure"]["stderr"].get<std::string>().find("MemoryError"), std::string::npos)
      << r.details;
  expect_pool_still_works(v);
}

TEST(CodeExecSandbox, NoNetworkToLoopbackOrOutside) {
  const Verifier& v = *shared_verifier();
  // A real listener on the host's loopback: the sandbox must not reach it.
  const int server = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(server, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(bind(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(server, 4), 0);
  socklen_t len = sizeof addr;
  getsockname(server, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  const std::string connect_to = "import socket\ns = socket.create_connection(('%s', %d), timeout=1)\ns.sendall(b'x')\nok = True";
  char code[512];
  std::snprintf(code, sizeof code, connect_to.c_str(), "127.0.0.1", port);
  EXPECT_EQ(run(v, code, kNeedsOk).score, 0.0);
  std::snprintf(code, sizeof code, connect_to.c_str(), "1.1.1.1", 53);
  EXPECT_EQ(run(v, code, kNeedsOk).score, 0.0);
  pollfd p{server, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 100), 0) << "the host listener got a connection from the sandbox";
  close(server);
  expect_pool_still_works(v);
}

TEST(CodeExecSandbox, WritesOutsideItsTmpNeverReachTheHost) {
  const Verifier& v = *shared_verifier();
  const fs::path in_project = fs::path(GRPO_SOURCE_DIR) / unique("grpo_sandbox_probe_");
  const fs::path in_tmp = fs::temp_directory_path() / unique("grpo_sandbox_probe_");
  for (const fs::path& target : {in_project, in_tmp}) {
    // The program's own /tmp is private: writing there works inside, but never shows on the host.
    const std::string code = "import os\nos.makedirs(os.path.dirname('" + target.string() +
                             "'), exist_ok=True)\nopen('" + target.string() + "', 'w').write('pwned')\nok = False";
    EXPECT_EQ(run(v, code, kNeedsOk).score, 0.0);
    EXPECT_FALSE(fs::exists(target)) << target;
  }
  expect_pool_still_works(v);
}

TEST(CodeExecSandbox, HostSecretsAreNotReadable) {
  const Verifier& v = *shared_verifier();
  const fs::path dir = fs::temp_directory_path() / unique("grpo_secret_");
  fs::create_directories(dir / ".ssh");
  const std::string secret = "SECRET-" + unique("");
  std::ofstream(dir / ".ssh" / "id_rsa") << secret;
  fs::permissions(dir, fs::perms::all, fs::perm_options::add);  // world-readable on the host
  fs::permissions(dir / ".ssh" / "id_rsa", fs::perms::others_read, fs::perm_options::add);
  for (const std::string& path : {(dir / ".ssh" / "id_rsa").string(), std::string("/etc/shadow"),
                                  std::string("/root/.ssh/id_rsa"), std::string("/etc/passwd")}) {
    const VerifierResult r = run(v, "data = open('" + path + "').read()\nprint(data)\nok = len(data) > 0", kNeedsOk);
    EXPECT_EQ(r.score, 0.0) << path << ": " << r.details;
    EXPECT_EQ(r.details.find(secret), std::string::npos);
  }
  fs::remove_all(dir);
  expect_pool_still_works(v);
}

TEST(CodeExecSandbox, KillingItsParentOnlyKillsItself) {
  const Verifier& v = *shared_verifier();
  // Inside its pid namespace the program's parent is nothing of the host's: the signal reaches
  // no host process (and this test process is alive to check the pool afterwards).
  const VerifierResult r = run(
      v, "import os, signal\ntry:\n    os.kill(os.getppid(), signal.SIGKILL)\nexcept OSError:\n    pass\nok = False", kNeedsOk);
  EXPECT_EQ(r.score, 0.0) << r.details;
  expect_pool_still_works(v);  // and this process is alive to run it
}

TEST(CodeExecSandbox, HundredMegabytesOfOutputIsCutOff) {
  const Verifier& v = *shared_verifier();
  const auto t0 = std::chrono::steady_clock::now();
  const VerifierResult r = run(v, "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 1000000)\nok = True", kNeedsOk);
  EXPECT_EQ(r.score, 0.0);
  EXPECT_EQ(details(r)["first_failure"]["killed"], "output limit") << r.details.substr(0, 500);
  EXPECT_LT(r.details.size(), 4096u);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  expect_pool_still_works(v);
}

TEST(CodeExecSandbox, BackgroundChildrenDieWithTheProgram) {
  const Verifier& v = *shared_verifier();
  const std::string marker = unique("GRPO_BACKGROUND_MARKER_");
  const std::string code = "import os, sys\nif os.fork() == 0:\n    os.setsid()\n    os.execv(sys.executable, "
                           "[sys.executable, '-c', 'import time; time.sleep(30)', '" +
                           marker + "'])\nok = False";
  EXPECT_EQ(run(v, code, kNeedsOk).score, 0.0);
  // The pid namespace went down with the program.
  EXPECT_TRUE(marker_process_gone(marker)) << "a background child outlived its sandbox";
  expect_pool_still_works(v);
}

// ---- correct solutions of a public benchmark ----------------------------------------------

TEST(CodeExecBenchmark, HumanEvalCanonicalSolutionsPassAndEmptyBodiesFail) {
  std::ifstream in(std::string(GRPO_CODE_FIXTURES) + "/humaneval.jsonl");
  ASSERT_TRUE(in.good());
  std::vector<json> rows;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(json::parse(line));
  ASSERT_EQ(rows.size(), 164u);
  const Verifier& v = *shared_verifier();
  std::atomic<std::size_t> next{0}, passed{0}, wrong_failed{0};
  std::vector<std::string> failures(rows.size());
  auto worker = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < rows.size();) {
      const json& r = rows[i];
      const json gt = {{"test", r["test"]}, {"entry_point", r["entry_point"]}};
      const VerifierResult ok = run(v, r["prompt"].get<std::string>() + r["canonical_solution"].get<std::string>(), gt);
      if (ok.score == 1.0) ++passed;
      else failures[i] = ok.details;
      // the same function with its body replaced by `return None`
      if (i % 8 == 0) {
        const VerifierResult bad = run(v, r["prompt"].get<std::string>() + "    return None\n", gt);
        if (bad.score == 0.0) ++wrong_failed;
        else failures[i] += " | empty body passed";
      }
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::size_t programs = rows.size() + (rows.size() + 7) / 8;
  std::printf("HumanEval: %zu sandboxed programs in %.2f s with 2 threads (%.1f programs/s)\n", programs, secs,
              programs / secs);
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (!failures[i].empty()) std::printf("HumanEval/%zu: %s\n", i, failures[i].substr(0, 300).c_str());
  std::printf("HumanEval canonical solutions: %zu / %zu pass; empty bodies failing: %zu / 21\n", passed.load(),
              rows.size(), wrong_failed.load());
  EXPECT_GE(passed.load() * 100, rows.size() * 99);
  EXPECT_EQ(wrong_failed.load(), 21u);
}

}  // namespace
