// NCCL process groups (core/dist) with a world of one rank: what a CUDA build's data-parallel
// trainer does on each GPU, without a second GPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/dist/local_launcher.h"
#include "core/dist/process_group.h"

using grpo::core::dist::DistOptions;
using grpo::core::dist::Distributed;
using grpo::core::dist::WorldInfo;

namespace {

// One rank hosting its own TCPStore on a free port; backend nccl, tensors on CUDA.
DistOptions nccl_options() {
  DistOptions o;
  o.backend = "nccl";
  o.timeout_s = 60;
  o.heartbeat_s = 0.2;
  return o;
}

WorldInfo one_rank() {
  WorldInfo w;
  w.master_port = grpo::core::dist::pick_free_port();
  w.launcher = "test";
  return w;
}

}  // namespace

TEST(Nccl, AllReduceSumOfOneRankIsTheTensorItself) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
#ifndef GRPO_HAVE_NCCL
  GTEST_SKIP() << "this build has no NCCL (GRPO_HAVE_NCCL: a CUDA LibTorch with NCCL and nccl.h)";
#else
  Distributed d(one_rank(), nccl_options(), /*tensors_on_cuda=*/true);
  EXPECT_EQ(d.backend(), "nccl");
  const torch::Device cuda("cuda:0");
  const torch::Tensor expected = torch::arange(1000, torch::kFloat32).mul_(0.37).sub_(11.0);
  std::vector<at::Tensor> tensors{expected.to(cuda), expected.to(cuda).to(torch::kBFloat16)};
  d.train().all_reduce_sum(tensors, "test tensors");
  torch::cuda::synchronize();
  EXPECT_TRUE(tensors[0].is_cuda());
  EXPECT_TRUE(torch::equal(tensors[0].to(torch::kCPU), expected));
  EXPECT_TRUE(torch::equal(tensors[1].to(torch::kCPU), expected.to(torch::kBFloat16)));

  at::Tensor bucket = expected.to(cuda);
  auto pending = d.train().all_reduce_sum_async(bucket, "test bucket");
  pending.wait();
  torch::cuda::synchronize();
  EXPECT_TRUE(torch::equal(bucket.to(torch::kCPU), expected));
#endif
}

// The trainer's other collectives on the same groups: scalars (metric sums, maxima), byte
// payloads (rollout results) and the barrier. They build their tensors on the host, which
// NCCL does not take ("Tensors must be CUDA and dense"); this fails until core/dist moves
// them to the rank's GPU (or runs them on a Gloo group) when the backend is NCCL.
TEST(Nccl, ScalarAndByteCollectivesWorkOnNcclGroups) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
#ifndef GRPO_HAVE_NCCL
  GTEST_SKIP() << "this build has no NCCL (GRPO_HAVE_NCCL: a CUDA LibTorch with NCCL and nccl.h)";
#else
  Distributed d(one_rank(), nccl_options(), /*tensors_on_cuda=*/true);
  EXPECT_DOUBLE_EQ(d.train().all_reduce_sum(2.5, "test sum"), 2.5);
  EXPECT_DOUBLE_EQ(d.train().all_reduce_max(-1.25, "test max"), -1.25);
  EXPECT_EQ(d.rollout().all_gather_bytes("abc", "test bytes"), std::vector<std::string>{"abc"});
  d.train().barrier("test barrier");
#endif
}
