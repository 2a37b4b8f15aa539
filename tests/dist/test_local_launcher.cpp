// The local launcher behind `grpo-run --nproc`: the environment each rank sees, exit status propagation,
// termination of stragglers after a failure, signal forwarding, and free-port picking. The ranks are
// /bin/sh scripts so the tests need no helper binary.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/dist/local_launcher.h"

namespace {

using namespace grpo::core::dist;
namespace fs = std::filesystem;

// A fresh directory under /tmp/grpo-dist-tests-<pid>, removed after the test.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::path("/tmp/grpo-dist-tests-" + std::to_string(getpid())) / info->name();
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_.parent_path(), ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

int run_sh(const std::string& script, LocalLaunchOptions options) {
  return launch_local_ranks({"/bin/sh", "-c", script}, options);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The NAME=value lines of an `env` dump.
std::map<std::string, std::string> read_env_file(const fs::path& path) {
  std::map<std::string, std::string> vars;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return vars;
}

TEST(LocalLauncher, EveryRankSeesItsEnvironment) {
  TempDir dir;
  setenv("GRPO_TEST_INHERITED", "kept", 1);
  setenv("RANK", "99", 1);  // a stale value from the parent must be replaced, not duplicated
  LocalLaunchOptions options;
  options.nproc = 3;
  options.master_port = 29555;
  const int code = run_sh("env > '" + dir.path().string() + "'/rank_$RANK", options);
  unsetenv("GRPO_TEST_INHERITED");
  unsetenv("RANK");
  ASSERT_EQ(code, 0);
  for (int r = 0; r < 3; ++r) {
    const auto vars = read_env_file(dir.path() / ("rank_" + std::to_string(r)));
    EXPECT_EQ(vars.at("RANK"), std::to_string(r));
    EXPECT_EQ(vars.at("LOCAL_RANK"), std::to_string(r));
    EXPECT_EQ(vars.at("WORLD_SIZE"), "3");
    EXPECT_EQ(vars.at("LOCAL_WORLD_SIZE"), "3");
    EXPECT_EQ(vars.at("MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(vars.at("MASTER_PORT"), "29555");
    EXPECT_EQ(vars.at("GRPO_LOCAL_LAUNCH"), "1");
    EXPECT_EQ(vars.at("GRPO_TEST_INHERITED"), "kept");
  }
  EXPECT_FALSE(fs::exists(dir.path() / "rank_3"));
  EXPECT_FALSE(fs::exists(dir.path() / "rank_99"));
}

TEST(LocalLauncher, PicksOneFreePortForAllRanks) {
  TempDir dir;
  LocalLaunchOptions options;
  options.nproc = 2;
  options.master_addr = "localhost";
  ASSERT_EQ(run_sh("env > '" + dir.path().string() + "'/rank_$RANK", options), 0);
  const auto rank0 = read_env_file(dir.path() / "rank_0");
  const auto rank1 = read_env_file(dir.path() / "rank_1");
  const int port = std::stoi(rank0.at("MASTER_PORT"));
  EXPECT_GT(port, 0);
  EXPECT_LE(port, 65535);
  EXPECT_EQ(rank1.at("MASTER_PORT"), rank0.at("MASTER_PORT"));
  EXPECT_EQ(rank0.at("MASTER_ADDR"), "localhost");
}

TEST(LocalLauncher, AllSucceedReturnsZero) {
  LocalLaunchOptions options;
  options.nproc = 4;
  EXPECT_EQ(run_sh("exit 0", options), 0);
}

TEST(LocalLauncher, FirstFailingRanksStatusIsReturned) {
  LocalLaunchOptions options;
  options.nproc = 2;
  EXPECT_EQ(run_sh("if [ \"$RANK\" = 1 ]; then exit 3; fi; sleep 0.3; exit 0", options), 3);
}

TEST(LocalLauncher, FirstFailureWinsOverLaterOnes) {
  LocalLaunchOptions options;
  options.nproc = 2;
  EXPECT_EQ(run_sh("if [ \"$RANK\" = 0 ]; then sleep 0.4; exit 4; fi; exit 5", options), 5);
}

TEST(LocalLauncher, StragglerIsTerminatedAfterGrace) {
  LocalLaunchOptions options;
  options.nproc = 2;
  options.grace_s = 0.5;
  const auto start = std::chrono::steady_clock::now();
  // exec so that SIGTERM reaches the sleep itself rather than a shell waiting on it.
  const int code = run_sh("if [ \"$RANK\" = 1 ]; then exec sleep 30; fi; exit 6", options);
  const double elapsed = seconds_since(start);
  EXPECT_EQ(code, 6);
  EXPECT_GE(elapsed, 0.5);
  EXPECT_LT(elapsed, 20.0);  // a bound on behaviour (terminated, not waited out), not a speed claim
}

TEST(LocalLauncher, SignalKilledRankCountsAs128PlusSignal) {
  LocalLaunchOptions options;
  options.nproc = 2;
  EXPECT_EQ(run_sh("if [ \"$RANK\" = 0 ]; then kill -9 $$; fi; exit 0", options), 128 + 9);
}

// A handler the test installs so it can see that the launcher restores it (and so an early signal is
// harmless).
volatile std::sig_atomic_t g_test_handler_calls = 0;
extern "C" void test_handler(int) { g_test_handler_calls = g_test_handler_calls + 1; }

TEST(LocalLauncher, ForwardsSigtermToRanksAndRestoresHandler) {
  struct sigaction mine {}, before {};
  mine.sa_handler = test_handler;
  sigemptyset(&mine.sa_mask);
  sigaction(SIGTERM, &mine, &before);
  g_test_handler_calls = 0;

  LocalLaunchOptions options;
  options.nproc = 2;
  std::thread sender([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(getpid(), SIGTERM);
  });
  const auto start = std::chrono::steady_clock::now();
  // `wait` returns when a trapped signal arrives, unlike a foreground sleep.
  const int code = run_sh("trap 'kill $! 2>/dev/null; exit 7' TERM; sleep 10 & wait", options);
  sender.join();
  EXPECT_EQ(code, 7);
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_EQ(g_test_handler_calls, 0);  // the launcher caught it, not the previous handler

  struct sigaction after {};
  sigaction(SIGTERM, nullptr, &after);
  EXPECT_EQ(after.sa_handler, test_handler);
  sigaction(SIGTERM, &before, nullptr);
}

TEST(LocalLauncher, UnexecutableProgramThrows) {
  LocalLaunchOptions options;
  options.nproc = 2;
  try {
    launch_local_ranks({"/nonexistent/grpo-program"}, options);
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/grpo-program"), std::string::npos) << e.what();
  }
}

TEST(LocalLauncher, BadOptionsThrow) {
  LocalLaunchOptions options;
  options.nproc = 0;
  EXPECT_THROW(run_sh("exit 0", options), std::runtime_error);
  options.nproc = 1;
  EXPECT_THROW(launch_local_ranks({}, options), std::runtime_error);
  options.master_port = 70000;
  EXPECT_THROW(run_sh("exit 0", options), std::runtime_error);
  options.master_port = 0;
  options.grace_s = -1;
  EXPECT_THROW(run_sh("exit 0", options), std::runtime_error);
}

TEST(PickFreePort, ReturnsABindablePort) {
  const int port = pick_free_port();
  ASSERT_GT(port, 0);
  ASSERT_LE(port, 65535);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  close(fd);
}

TEST(PickFreePort, UnresolvableAddressThrows) {
  EXPECT_THROW(pick_free_port("no such host.invalid"), std::runtime_error);
}

}  // namespace
