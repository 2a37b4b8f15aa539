// How programs choose LibTorch's intra-op thread count (core/runtime/threads.h): the
// environment's OMP_NUM_THREADS wins, otherwise every core this process may use, shared among
// the host's ranks; an async trainer splits its threads with the rollout thread.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>
#include <sched.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "core/runtime/threads.h"

using namespace grpo::core;

namespace {

// Sets or unsets OMP_NUM_THREADS for one test and restores it.
class OmpEnv {
 public:
  explicit OmpEnv(const char* value) {
    if (const char* old = std::getenv("OMP_NUM_THREADS")) old_ = old;
    if (value) ::setenv("OMP_NUM_THREADS", value, 1);
    else ::unsetenv("OMP_NUM_THREADS");
  }
  ~OmpEnv() {
    if (old_) ::setenv("OMP_NUM_THREADS", old_->c_str(), 1);
    else ::unsetenv("OMP_NUM_THREADS");
  }

 private:
  std::optional<std::string> old_;
};

// The independent count: the affinity mask, counted bit by bit.
int affinity_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  int n = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) n += CPU_ISSET(c, &set) ? 1 : 0;
  return n;
}

}  // namespace

TEST(ComputeThreads, EveryAvailableCoreWhenNothingIsSet) {
  const OmpEnv env(nullptr);
  EXPECT_EQ(available_cores(), affinity_cores());
  const ThreadChoice one = choose_compute_threads(1);
  EXPECT_EQ(one.threads, affinity_cores());
  EXPECT_NE(one.reason.find(std::to_string(affinity_cores()) + " core"), std::string::npos) << one.reason;
  // Ranks of one host share the cores, each keeping at least one.
  EXPECT_EQ(choose_compute_threads(2).threads, std::max(1, affinity_cores() / 2));
  EXPECT_EQ(choose_compute_threads(1000).threads, 1);
}

TEST(ComputeThreads, OmpNumThreadsWinsAndAnInvalidValueIsIgnored) {
  {
    const OmpEnv env("3");
    const ThreadChoice c = choose_compute_threads(2);
    EXPECT_EQ(c.threads, 3);
    EXPECT_EQ(c.reason, "OMP_NUM_THREADS=3");
  }
  for (const char* bad : {"0", "-2", "two", "4x"}) {
    const OmpEnv env(bad);
    EXPECT_EQ(choose_compute_threads(1).threads, affinity_cores()) << bad;
  }
}

TEST(ComputeThreads, ConfigureSetsLibTorchsCount) {
  const OmpEnv env("3");
  EXPECT_EQ(configure_compute_threads("test"), 3);
  EXPECT_EQ(at::get_num_threads(), 3);
  at::set_num_threads(1);
}

TEST(ComputeThreads, AsyncSplitGivesTheTrainerTheLargerHalf) {
  EXPECT_EQ(async_thread_split(1), std::make_pair(1, 1));  // one core: both threads still compute
  EXPECT_EQ(async_thread_split(2), std::make_pair(1, 1));
  EXPECT_EQ(async_thread_split(3), std::make_pair(2, 1));
  EXPECT_EQ(async_thread_split(16), std::make_pair(8, 8));
}
