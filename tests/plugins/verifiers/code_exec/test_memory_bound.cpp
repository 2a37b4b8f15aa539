// The sandbox's bound on a whole program (docs/sandbox.md, "Memory bound"): read-only / and
// /dev, sized /tmp and /dev/shm, and the per-run cgroup leaf (memory + tmpfs, processes).
// The hostile programs print the pass token only after their hostile action, so a score of 1
// means the bound failed. CodeExecMemoryBound.* measure the host's memory while the program
// runs and run alone (RUN_SERIAL, tests/plugins/verifiers/code_exec/CMakeLists.txt).
#include <dirent.h>
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "code_exec_test_util.h"
#include "grpo/sdk/config_value.h"
#include "plugins/shared/sandbox/cgroup.h"

namespace {

using grpo::sdk::ConfigError;
using grpo_code_test::details;
using grpo_code_test::kNeedsOk;
using grpo_code_test::make;
using grpo_code_test::Option;
using grpo_code_test::run;
using grpo_code_test::Verifier;
using grpo_code_test::VerifierResult;
using json = nlohmann::json;

namespace fs = std::filesystem;
constexpr std::int64_t kMiB = 1 << 20;

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The "grpo-code" parents of the sandbox's leaves that exist, found as docs/sandbox.md says
// ("Memory bound"): under this process's own cgroups, or beside "grpo-code-host" where the
// verifier moved this process on cgroup v2.
std::vector<std::string> leaf_parents() {
  const grpo_sandbox::CgroupDirs d =
      grpo_sandbox::locate_cgroup_dirs(read_all("/proc/self/mountinfo"), read_all("/proc/self/cgroup"));
  std::vector<std::string> candidates = {d.v1_memory, d.v1_pids, d.v2};
  if (fs::path(d.v2).filename() == "grpo-code-host") candidates.back() = fs::path(d.v2).parent_path().string();
  std::vector<std::string> out;
  for (const std::string& dir : candidates)
    if (!dir.empty() && fs::is_directory(dir + "/grpo-code")) out.push_back(dir + "/grpo-code");
  return out;
}

// Leaves named after `pid` ("<pid>-<tag>.<slot>-<counter>") under the parents.
std::vector<std::string> leaves_of(pid_t pid) {
  std::vector<std::string> out;
  for (const std::string& parent : leaf_parents())
    for (const auto& e : fs::directory_iterator(parent))
      if (e.is_directory() && e.path().filename().string().rfind(std::to_string(pid) + "-", 0) == 0)
        out.push_back(e.path().string());
  return out;
}

// The memory a program takes from the host, sampled from the host side while it runs:
// /proc/meminfo's AnonPages + Shmem (every process's anonymous memory and every tmpfs,
// /dev/shm included: what no reclaim can give back without swap) minus the anonymous memory
// (RssAnon) of every process that is not this test or one of its descendants (bwrap and the
// sandboxed program are). The subtraction keeps the measurement valid on a shared machine,
// where parallel builds move AnonPages by GBs a second. MemTotal - MemAvailable is not used:
// on the 2-core build machine it drifted by 290-1400 MB within 30 s with nothing of ours
// running (page cache and free lists of the neighbours), more than the bounds under test.
// meminfo is read before and after each scan of /proc and the smaller value kept (a process
// that exits during the scan is then counted in neither term); a level counts only once held
// for three consecutive samples, since a process started during a scan (a pid below the scan's
// position, after a wrap) is missed for one sample. Measured without a sandbox running: the
// largest three-sample rise over 25 s was 4 MB.
class HostMemorySampler {
 public:
  HostMemorySampler() {
    // A baseline before the program starts: the median of a few samples.
    std::vector<std::int64_t> base;
    for (int i = 0; i < 15; ++i) {
      base.push_back(sample());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::sort(base.begin(), base.end());
    baseline_ = base[base.size() / 2];
    peak_ = baseline_;
    thread_ = std::thread([this] {
      std::int64_t last[3] = {baseline_, baseline_, baseline_};
      for (int n = 0; !stop_; ++n) {
        last[n % 3] = sample();
        peak_ = std::max(peak_.load(), std::min({last[0], last[1], last[2]}));
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  ~HostMemorySampler() { stop(); }

  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // Peak rise over the baseline while sampling, MiB.
  double rise_mb() const { return static_cast<double>(peak_ - baseline_) / kMiB; }

 private:
  // AnonPages + Shmem, bytes.
  static std::int64_t unreclaimable() {
    std::ifstream f("/proc/meminfo");
    std::int64_t sum = 0;
    for (std::string key; f >> key;) {
      std::int64_t kb = 0;
      f >> kb;
      f.ignore(64, '\n');
      if (key == "AnonPages:" || key == "Shmem:") sum += kb * 1024;
    }
    return sum;
  }

  // Bytes of RssAnon of every process outside this test's tree.
  static std::int64_t others_anon() {
    std::map<pid_t, pid_t> parent;
    std::map<pid_t, std::int64_t> anon;
    DIR* d = opendir("/proc");
    while (dirent* e = d ? readdir(d) : nullptr) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      std::ifstream f(std::string("/proc/") + e->d_name + "/status");
      const pid_t pid = static_cast<pid_t>(std::atol(e->d_name));
      for (std::string line; std::getline(f, line);) {
        if (line.rfind("PPid:", 0) == 0) parent[pid] = static_cast<pid_t>(std::atol(line.c_str() + 5));
        if (line.rfind("RssAnon:", 0) == 0) anon[pid] = std::atoll(line.c_str() + 8) * 1024;
      }
    }
    if (d) closedir(d);
    std::int64_t sum = 0;
    const pid_t self = getpid();
    for (const auto& [pid, bytes] : anon) {
      bool ours = false;
      for (pid_t p = pid, hops = 0; p > 1 && hops < 64 && !ours; ++hops) {
        ours = p == self;
        const auto it = parent.find(p);
        p = it == parent.end() ? 0 : it->second;
      }
      if (!ours) sum += bytes;
    }
    return sum;
  }

  static std::int64_t sample() {
    const std::int64_t before = unreclaimable();
    const std::int64_t others = others_anon();
    return std::min(before, unreclaimable()) - others;
  }

  std::int64_t baseline_ = 0;
  std::atomic<std::int64_t> peak_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// What the rise may exceed the configured bound by: the sampler's own error (4 MB measured
// idle, RssAnon is counted in per-CPU batches) and the test's own memory while it waits.
// Measured rises are in docs/sandbox.md.
constexpr double kSlackMb = 32.0;

struct Measured {
  VerifierResult result;
  double rise_mb = 0.0;
};

Measured run_measured(const Verifier& v, const std::string& code) {
  Measured m;
  HostMemorySampler sampler;
  m.result = run(v, code, kNeedsOk);
  sampler.stop();
  m.rise_mb = sampler.rise_mb();
  return m;
}

// The failing test's stderr, "" when every test passed.
std::string failure_stderr(const VerifierResult& r) {
  const json f = details(r).value("first_failure", json::object());
  return f.value("stderr", std::string());
}

// 200 files of 1 MB under `dir`: RLIMIT_FSIZE caps one file, not their sum.
std::string write_200_mb(const std::string& dir) {
  return "block = b'x' * (1 << 20)\nfor i in range(200):\n    with open('" + dir +
         "/fill%d' % i, 'wb') as f:\n        f.write(block)\nok = True";
}

// Four processes holding 800 MB each at once (3.2 GB): three children and the parent touch
// their blocks (b'x' * N writes every page), the children ack and wait; the parent checks
// that all four held theirs together. A process killed meanwhile ends the program.
constexpr const char* kFourTimes800Mb =
    "import os, select\n"
    "N = 800 * 1024 * 1024\n"
    "ack_r, ack_w = os.pipe()\n"
    "go_r, go_w = os.pipe()\n"
    "kids = []\n"
    "for _ in range(3):\n"
    "    pid = os.fork()\n"
    "    if pid == 0:\n"
    "        os.close(ack_r)\n"
    "        os.close(go_w)\n"
    "        block = b'x' * N\n"
    "        os.write(ack_w, b'k')\n"
    "        os.read(go_r, 1)\n"
    "        os._exit(0)\n"
    "    kids.append(pid)\n"
    "os.close(ack_w)\n"
    "os.close(go_r)\n"
    "block = b'x' * N\n"
    "acks = 0\n"
    "while acks < 3:\n"
    "    ready, _, _ = select.select([ack_r], [], [], 0.05)\n"
    "    if ready:\n"
    "        acks += len(os.read(ack_r, 3))\n"
    "    pid, status = os.waitpid(-1, os.WNOHANG)\n"
    "    if pid:\n"
    "        raise SystemExit('a process holding 800 MB died: status %d' % status)\n"
    "os.close(go_w)\n"
    "for pid in kids:\n"
    "    assert os.waitpid(pid, 0)[1] == 0\n"
    "ok = True";

// memory_mb 128 is enough for Python and keeps the bound of these runs small.
std::vector<Option> small_program() {
  return {{"memory_mb", "128"}, {"tmp_mb", "64"}, {"shm_mb", "64"}, {"timeout_s", "10"}};
}
constexpr double kSmallBoundMb = 128 + 64 + 64;

// ---- no cgroup needed: read-only / and /dev, sized /dev/shm ----------------------------

TEST(CodeExecMemoryBound, TwoHundredMegabytesToTheRootOrDevAreRefused) {
  const std::shared_ptr<Verifier> v = make(small_program());
  for (const std::string dir : {"", "/dev"}) {
    const Measured m = run_measured(*v, write_200_mb(dir));
    std::printf("200 MB to %s/: host rise %.0f MB, bound %.0f MB\n", dir.c_str(), m.rise_mb, kSmallBoundMb);
    EXPECT_EQ(m.result.score, 0.0) << dir << "/: " << m.result.details;
    EXPECT_NE(failure_stderr(m.result).find("Read-only file system"), std::string::npos) << m.result.details;
    EXPECT_LT(m.rise_mb, kSmallBoundMb + kSlackMb) << dir;
  }
}

TEST(CodeExecMemoryBound, TwoHundredMegabytesToDevShmStopAtShmMb) {
  const std::shared_ptr<Verifier> v = make(small_program());
  const Measured m = run_measured(*v, write_200_mb("/dev/shm"));
  std::printf("200 MB to /dev/shm: host rise %.0f MB, bound %.0f MB\n", m.rise_mb, kSmallBoundMb);
  EXPECT_EQ(m.result.score, 0.0) << m.result.details;
  EXPECT_NE(failure_stderr(m.result).find("No space left on device"), std::string::npos) << m.result.details;
  EXPECT_LT(m.rise_mb, kSmallBoundMb + kSlackMb);
}

// ---- the cgroup: 4 x 800 MB with memory_mb 1024 ------------------------------------------

TEST(CodeExecMemoryBound, FourProcessesOf800MegabytesAreKilledByTheCgroup) {
  // RLIMIT_AS (1024 MB per process) lets each of the four allocate its 800 MB; only the
  // cgroup's limit on their sum, 1024 + 64 + 64 MB, stops them.
  const std::vector<Option> opts = {{"memory_mb", "1024"}, {"tmp_mb", "64"},        {"shm_mb", "64"},
                                    {"timeout_s", "20"},   {"max_concurrency", "1"}, {"require_cgroup", "true"}};
  std::shared_ptr<Verifier> v;
  try {
    v = make(opts);
  } catch (const ConfigError& e) {
    GTEST_SKIP() << "no cgroup bound on this host, so nothing bounds the sum of a program's processes: " << e.what();
  }
  const double bound_mb = 1024 + 64 + 64;
  const Measured m = run_measured(*v, kFourTimes800Mb);
  const json f = details(m.result).value("first_failure", json::object());
  std::printf("4 x 800 MB: host rise %.0f MB, leaf peak %s MB, bound %.0f MB\n", m.rise_mb,
              f.value("memory_peak_mb", json()).dump().c_str(), bound_mb);
  EXPECT_LT(m.rise_mb, bound_mb + kSlackMb);
  EXPECT_EQ(m.result.score, 0.0) << m.result.details;
  EXPECT_EQ(f.value("killed", ""), "memory limit") << m.result.details;
  // The leaf's own peak, read by the sandbox before it removed the leaf.
  ASSERT_TRUE(f.contains("memory_peak_mb")) << m.result.details;
  EXPECT_LE(f["memory_peak_mb"].get<double>(), bound_mb) << m.result.details;
  // The leaf went away with the run, killed program and all.
  EXPECT_FALSE(leaf_parents().empty());
  EXPECT_TRUE(leaves_of(getpid()).empty()) << leaves_of(getpid()).front();
  grpo_code_test::expect_pool_still_works(*v);
}

// ---- /tmp and /dev/shm stay usable, at their sizes ----------------------------------------

TEST(CodeExecSandbox, TmpAndDevShmAreWritableUpToTheirSizes) {
  const std::shared_ptr<Verifier> v = make(small_program());
  // 32 files of 1 MB fit in 64 MB; 200 do not.
  const std::string fill_32 = "block = b'x' * (1 << 20)\nfor i in range(32):\n    with open('/tmp/f%d' % i, 'wb') "
                              "as f:\n        f.write(block)\nok = True";
  EXPECT_EQ(run(*v, fill_32, kNeedsOk).score, 1.0);
  const VerifierResult full = run(*v, write_200_mb("/tmp"), kNeedsOk);
  EXPECT_EQ(full.score, 0.0) << full.details;
  EXPECT_NE(full.details.find("No space left on device"), std::string::npos) << full.details;
  // shm_mb sizes /dev/shm: 200 MB fit in 256 MB.
  const std::shared_ptr<Verifier> big_shm = make({{"memory_mb", "128"}, {"shm_mb", "256"}, {"timeout_s", "10"}});
  const VerifierResult fits = run(*big_shm, write_200_mb("/dev/shm"), kNeedsOk);
  EXPECT_EQ(fits.score, 1.0) << fits.details;
}

// ---- leaves of processes that no longer exist -------------------------------------------

TEST(CodeExecSandbox, StaleLeavesOfDeadProcessesAreRemovedAtStartUp) {
  // The threadsafe death-test child re-runs this body up to EXPECT_EXIT: there it must not
  // detect the cgroups before the statement, nor leave a stale leaf of its own.
  const bool death_test_child = !GTEST_FLAG_GET(internal_run_death_test).empty();
  std::vector<std::string> stale;
  if (!death_test_child) {
    try {
      make({{"require_cgroup", "true"}});  // creates the parents where a cgroup bound exists
    } catch (const ConfigError& e) {
      GTEST_SKIP() << "no cgroup bound on this host: " << e.what();
    }
    // A leaf as a process that died during a run would leave it: named after a pid that no
    // longer exists (a child, reaped).
    const pid_t dead = fork();
    if (dead == 0) _exit(0);
    ASSERT_GT(dead, 0);
    waitpid(dead, nullptr, 0);
    for (const std::string& parent : leaf_parents()) {
      stale.push_back(parent + "/" + std::to_string(dead) + "-0-0");
      ASSERT_TRUE(fs::create_directory(stale.back())) << stale.back();
    }
    ASSERT_FALSE(stale.empty());
  }
  // A fresh process (the threadsafe style re-runs this program) detects the cgroups once at
  // its first verifier, and removes them then.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        make();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  for (const std::string& dir : stale) {
    EXPECT_FALSE(fs::exists(dir)) << dir;
    fs::remove(dir);
  }
}

// ---- require_cgroup ------------------------------------------------------------------------

TEST(CodeExecSandbox, RequireCgroupRefusesToStartWithoutOne) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to start a child as uid 65534, which may create no cgroup";
  // A fresh process (the threadsafe style re-runs this program) so that the cgroup detection,
  // once per process, happens as uid 65534: cgroup directories are root's.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) std::exit(2);
        try {
          make({{"require_cgroup", "true"}});
        } catch (const ConfigError& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::exit(0);
        }
        std::exit(1);
      },
      ::testing::ExitedWithCode(0), "verifiers\\[0\\]\\.require_cgroup: no cgroup can bound");
}

}  // namespace
