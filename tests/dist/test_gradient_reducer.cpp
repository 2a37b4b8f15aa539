// The gradient reducer and the communicator on a real Gloo process group: two ranks as two
// threads of this process (rank 0 hosts the TCPStore). Reference gradients come from one
// autograd pass over both ranks' losses on separate parameter copies.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <thread>

#include "core/dist/gradient_reducer.h"
#include "core/dist/local_launcher.h"
#include "core/dist/process_group.h"
#include "tests/support/gloo_ranks.h"

namespace {

using grpo::core::dist::Communicator;
using grpo::core::dist::Distributed;
using grpo::core::dist::GradientReducer;
using grpo::core::dist::PeerLostError;

using grpo::testing::run_two_ranks;

// A two-layer network as plain leaf tensors: loss = sum((tanh(x W1 + b1) W2)^2).
struct Net {
  std::vector<at::Tensor> params;
  explicit Net(const std::vector<at::Tensor>& init) {
    for (const auto& p : init) params.push_back(p.clone().set_requires_grad(true));
  }
  at::Tensor loss(const at::Tensor& x) const {
    return torch::tanh(x.matmul(params[0]) + params[1]).matmul(params[2]).pow(2).sum();
  }
};

std::vector<at::Tensor> initial_params() {
  torch::manual_seed(5);
  return {torch::randn({8, 16}), torch::randn({16}), torch::randn({16, 4})};
}

TEST(GradientReducer, SumsEveryRanksGradientsBucketByBucketDuringBackward) {
  const auto init = initial_params();
  torch::manual_seed(6);
  const at::Tensor x0a = torch::randn({3, 8}), x0b = torch::randn({5, 8}), x1 = torch::randn({4, 8});
  // Reference: one process holding every micro-batch of both ranks.
  Net ref(init);
  (ref.loss(x0a) + ref.loss(x0b) + ref.loss(x1)).backward();

  std::vector<at::Tensor> grads[2];
  std::size_t early[2] = {0, 0}, buckets = 0;
  run_two_ranks([&](int rank, Distributed& d) {
    Net net(init);
    GradientReducer reducer(net.params, d.train(), /*bucket_bytes=*/256);  // W2 (256 B), b1 (64 B), W1 (512 B): one bucket each
    buckets = reducer.num_buckets();
    for (int step = 0; step < 2; ++step) {  // the reducer is reusable: the second step sees the same sums
      for (auto& p : net.params) p.mutable_grad() = at::Tensor();
      if (rank == 0) {
        net.loss(x0a).backward();  // an accumulating micro-batch: not armed
        reducer.arm();
        net.loss(x0b).backward();
      } else {
        reducer.arm();
        net.loss(x1).backward();
      }
      reducer.finish();
    }
    early[rank] = reducer.launched_during_backward();
    for (const auto& p : net.params) grads[rank].push_back(p.grad().clone());
  });
  EXPECT_EQ(buckets, 3u);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_GT(early[rank], 0u) << "no bucket started before finish() on rank " << rank;
    for (std::size_t k = 0; k < ref.params.size(); ++k)
      EXPECT_TRUE(torch::allclose(grads[rank][k], ref.params[k].grad(), 1e-5, 1e-6)) << "rank " << rank << " param " << k;
  }
}

TEST(GradientReducer, ARankWithoutBackwardContributesZeros) {
  const auto init = initial_params();
  torch::manual_seed(7);
  const at::Tensor x = torch::randn({6, 8});
  Net ref(init);
  ref.loss(x).backward();
  std::vector<at::Tensor> grads[2];
  run_two_ranks([&](int rank, Distributed& d) {
    Net net(init);
    GradientReducer reducer(net.params, d.train(), 1 << 20);
    if (rank == 0) {
      reducer.arm();
      net.loss(x).backward();
    }
    reducer.finish();  // rank 1: no samples in this mini-batch, undefined gradients
    for (const auto& p : net.params) grads[rank].push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  });
  for (int rank = 0; rank < 2; ++rank)
    for (std::size_t k = 0; k < ref.params.size(); ++k) {
      ASSERT_TRUE(grads[rank][k].defined()) << "rank " << rank << " param " << k;
      EXPECT_TRUE(torch::allclose(grads[rank][k], ref.params[k].grad(), 1e-6, 1e-7)) << "rank " << rank << " param " << k;
    }
}

TEST(Communicator, GathersBytesOfDifferentLengthsAndReduces) {
  std::vector<std::string> gathered[2];
  double maxima[2] = {0, 0}, sums[2] = {0, 0};
  run_two_ranks([&](int rank, Distributed& d) {
    gathered[rank] = d.train().all_gather_bytes(rank == 0 ? std::string("") : std::string("r1\0x", 4), "test");
    maxima[rank] = d.train().all_reduce_max(rank == 0 ? 2.5 : -1.0, "max");
    sums[rank] = d.rollout().all_reduce_sum(rank + 0.25, "sum");  // the second process group
    std::vector<at::Tensor> t{torch::full({3}, double(rank + 1), torch::kFloat64)};
    d.train().broadcast(t, 1, "broadcast");
    EXPECT_TRUE(torch::equal(t[0], torch::full({3}, 2.0, torch::kFloat64)));
  });
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(gathered[rank].size(), 2u);
    EXPECT_EQ(gathered[rank][0], "");
    EXPECT_EQ(gathered[rank][1], std::string("r1\0x", 4));
    EXPECT_EQ(maxima[rank], 2.5);
    EXPECT_EQ(sums[rank], 1.5);
  }
}

TEST(Communicator, APeerThatAnnouncedItsFailureIsNamed) {
  std::string message;
  int lost = -2;
  run_two_ranks([&](int rank, Distributed& d) {
    if (rank == 1) {
      d.announce_failure("data error: train.jsonl:3: missing ground_truth");
      return;  // leaves without the collective; its process group closes
    }
    try {
      d.train().barrier("end of step 4");
    } catch (const PeerLostError& e) {
      message = e.what();
      lost = e.lost_rank();
    }
  });
  EXPECT_EQ(lost, 1) << message;
  EXPECT_NE(message.find("'end of step 4'"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 1 failed: data error: train.jsonl:3: missing ground_truth"), std::string::npos) << message;
}

TEST(Communicator, ALostPeerIsNamedWithTheCollectiveItWasLastIn) {
  // Issue 21: the heartbeat carried the position of its period's start, so a rank that ran
  // through several collectives within one period and then died was reported "in #0
  // 'start-up'". Here rank 1 completes collectives #1..#5 within one 1 s period, then stops
  // without a word (its process group closes, its heartbeat ends, as when it is killed).
  std::string message;
  int lost = -2;
  run_two_ranks(
      [&](int rank, Distributed& d) {
        for (int step = 1; step <= 5; ++step) d.train().barrier("end of step " + std::to_string(step));
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          return;
        }
        try {
          d.train().barrier("end of step 6");
        } catch (const PeerLostError& e) {
          message = e.what();
          lost = e.lost_rank();
        }
      },
      /*heartbeat_s=*/1.0);
  EXPECT_EQ(lost, 1) << message;
  EXPECT_EQ(message.rfind("collective #6 'end of step 6' failed on rank 0: lost rank 1: no heartbeat", 0), 0u) << message;
  EXPECT_NE(message.find("its last heartbeat had it just past collective #5 'end of step 5' (completed)"), std::string::npos)
      << message;
}

}  // namespace
