// Every preset of configs/algorithms validates (`grpo-run --validate-fragment` constructs each named
// component from the built plugins), and a wrong component name lists the available ones.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/support/run_command.h"

namespace {

using Result = grpo::testing::CommandResult;

Result grpo_run(const std::string& args) {
  return grpo::testing::run_command("cd '" GRPO_SOURCE_DIR "' && env -u GRPO_PLUGIN_PATH '" GRPO_RUN_BINARY "' " + args +
                                    " 2>&1");
}

struct PresetCase {
  std::string name;
  std::string components;  // what --validate constructs
  std::string algorithm;   // its summary of the runtime settings
};

class Preset : public ::testing::TestWithParam<PresetCase> {};

TEST_P(Preset, Validates) {
  const std::string file = "configs/algorithms/" + GetParam().name + ".yaml";
  ASSERT_TRUE(std::filesystem::exists(std::string(GRPO_SOURCE_DIR) + "/" + file)) << file;
  Result r = grpo_run("--validate-fragment --config " + file);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("components: " + GetParam().components + "\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("algorithm: " + GetParam().algorithm + "\n"), std::string::npos) << r.output;
}

// Expected from each preset file as written (docs/algorithms.md shows the same table).
INSTANTIATE_TEST_SUITE_P(
    Algorithms, Preset,
    ::testing::Values(
        PresetCase{"grpo", "algorithm.advantage=grpo, algorithm.policy_loss=ppo_clip, algorithm.kl_estimator=k3",
                   "loss seq-mean-token-mean, KL 0.04 in the loss (reference model loaded), mismatch correction none"},
        PresetCase{"dapo", "algorithm.advantage=grpo, algorithm.policy_loss=ppo_clip",
                   "loss token-mean, no KL term (no reference model), mismatch correction none"},
        PresetCase{"dr_grpo", "algorithm.advantage=dr_grpo, algorithm.policy_loss=ppo_clip",
                   "loss seq-mean-token-sum-norm, no KL term (no reference model), mismatch correction none"},
        PresetCase{"cispo", "algorithm.advantage=grpo, algorithm.policy_loss=cispo",
                   "loss token-mean, no KL term (no reference model), mismatch correction none"},
        PresetCase{"gspo", "algorithm.advantage=grpo, algorithm.policy_loss=gspo",
                   "loss seq-mean-token-mean, no KL term (no reference model), mismatch correction none"},
        PresetCase{"rloo", "algorithm.advantage=rloo, algorithm.policy_loss=ppo_clip, algorithm.kl_estimator=k1",
                   "loss token-mean, KL 0.001 in the reward (reference model loaded), mismatch correction none"},
        PresetCase{"reinforce_pp",
                   "algorithm.advantage=reinforce_pp, algorithm.policy_loss=ppo_clip, algorithm.kl_estimator=k1",
                   "loss token-mean, KL 0.001 in the reward (reference model loaded), mismatch correction none"}),
    [](const ::testing::TestParamInfo<PresetCase>& info) { return info.param.name; });

TEST(PresetErrors, WrongNamesListTheAvailableComponents) {
  Result r = grpo_run("--validate-fragment --config configs/algorithms/grpo.yaml --set algorithm.policy_loss.name=ppo_clipp");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("algorithm.policy_loss: no policy_loss named 'ppo_clipp' (did you mean 'ppo_clip'?)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("cispo, gspo, ppo_clip, reinforce, sapo"), std::string::npos) << r.output;

  r = grpo_run("--validate-fragment --config configs/algorithms/grpo.yaml --set algorithm.advantage=rlooo");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("dr_grpo, grpo, grpo_passk, reinforce_pp, reinforce_pp_baseline, rloo"), std::string::npos)
      << r.output;

  r = grpo_run("--validate-fragment --config configs/algorithms/grpo.yaml --set algorithm.kl_estimator=k5");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("k1, k2, k3, k4"), std::string::npos) << r.output;
}

TEST(PresetErrors, UnknownComponentOptionNamesTheKeyPath) {
  Result r = grpo_run("--validate-fragment --config configs/algorithms/dapo.yaml --set algorithm.policy_loss.clip_hgh=0.3");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("algorithm.policy_loss.clip_hgh: unknown option"), std::string::npos) << r.output;
}

TEST(AlgorithmSettings, ValidateReportsThemAndCrossKeyErrorsNameTheKey) {
  Result r = grpo_run("--validate-fragment --config configs/algorithms/rloo.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("algorithm: loss token-mean, KL 0.001 in the reward (reference model loaded)"), std::string::npos)
      << r.output;

  r = grpo_run("--validate-fragment --config configs/algorithms/dapo.yaml --set algorithm.kl_coef=0.05");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("--set #1: algorithm.kl_coef: a KL coefficient of 0.05 needs an algorithm.kl_estimator"),
            std::string::npos)
      << r.output;

  r = grpo_run("--validate-fragment --config configs/algorithms/dapo.yaml --set algorithm.kl_coef=-1 --set algorithm.kl_estimator=k3");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("algorithm.kl_coef:"), std::string::npos) << r.output;

  r = grpo_run("--validate-fragment --config configs/algorithms/dapo.yaml --set algorithm.mismatch_correction.mode=token_mask "
               "--set algorithm.mismatch_correction.min=3 --set algorithm.mismatch_correction.max=2");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("algorithm.mismatch_correction: mismatch_correction.min must satisfy 0 <= min < max"),
            std::string::npos)
      << r.output;

  r = grpo_run("--validate-fragment --config configs/algorithms/dapo.yaml --set algorithm.loss_aggregation=token-sum");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("expected one of token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm"),
            std::string::npos)
      << r.output;
}

}  // namespace
