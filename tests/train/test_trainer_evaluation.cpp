// The evaluation stage alone (core/train/evaluation.h) with a scripted backend and verifier:
// the eval split's loading and cut, the eval sampling, the seeds (the same at every
// evaluation), pass@k and the eval/* metrics.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/config/config_loader.h"
#include "core/train/evaluation.h"
#include "tests/support/error_of.h"
#include "tests/support/test_dir.h"
#include "tests/train/rollout_fakes.h"

namespace {

using namespace grpo::core;
using namespace grpo::testing;

TEST(TrainerEvaluation, PassAtKAndMetricsOfAHandScoredSplit) {
  TrainerSettings s;
  s.seed = 1;
  s.top_p = 0.9;              // greedy evaluation ignores it
  s.eval_num_samples = 4;
  s.eval_pass_k = 2;
  s.eval_temperature = 0.0;
  s.chat_template = "none";
  const PromptSet eval = tokenize_prompts({row("p0", 1), row("same", 2)}, byte_tokenizer(), s, "eval");
  ScriptedBackend backend;
  const std::vector<VerifierSlot> verifiers{{"yes", "verifiers[0]", 1.0, std::make_shared<YesVerifier>()}};
  VerifierPool pool(1, 30.0);
  RolloutContext ctx(s, backend, verifiers, RewardOptions{}, pool);

  std::vector<Group> groups;
  const auto weights = weights_of_version(5);
  const MetricList m = evaluate_prompts(ctx, eval, weights.get(), /*step=*/3, &groups);
  // p0: yes, no, yes, no (2 of 4 correct); same: 4 of 4.
  // pass@2: 1 - C(2, 2) / C(4, 2) = 5/6 for p0, 1 for "same": mean 11/12.
  EXPECT_DOUBLE_EQ(metric_value(m, "eval/pass_at_2"), 11.0 / 12.0);
  EXPECT_EQ(metric_value(m, "eval/verifiable_correct_rate"), 0.75);
  EXPECT_EQ(metric_value(m, "eval/scores"), 7.5);  // 6 of 8 samples score 10
  EXPECT_EQ(metric_value(m, "eval/prompts"), 2.0);
  EXPECT_EQ(metric_value(m, "eval/sequence_lengths"), 2.5);  // six of 3 tokens, two of 1: 20 / 8
  EXPECT_EQ(metric_value(m, "time/eval", -1.0) >= 0.0, true);
  EXPECT_EQ(m.back().first, "time/eval");
  for (const auto& [name, value] : m) EXPECT_TRUE(name.rfind("eval/", 0) == 0 || name == "time/eval") << name;
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].example.line, 1u);
  EXPECT_EQ(groups[0].policy_version, 3);
  EXPECT_EQ(ctx.backend_version, -2);  // the trainer's current weights, not a published version

  // A second evaluation samples with the same seeds: mix_seed(run.seed 1, 0xE7A1, prompt index).
  evaluate_prompts(ctx, eval, nullptr, 4, nullptr);
  std::lock_guard<std::mutex> lock(backend.mutex);
  EXPECT_EQ(backend.loaded_versions, std::vector<std::int64_t>{5});
  EXPECT_EQ(backend.seeds, (std::vector<std::uint64_t>{0xc8aa32ea53e846ffULL, 0x24c7761d339ae94dULL, 0xc8aa32ea53e846ffULL,
                                                       0x24c7761d339ae94dULL}));
  ASSERT_EQ(backend.sampling.size(), 4u);
  EXPECT_EQ(backend.sampling[0].temperature, 0.0);
  EXPECT_EQ(backend.sampling[0].top_p, 1.0);
}

TEST(TrainerEvaluation, EvalSplitIsFilteredThenCut) {
  const std::string dir = fresh_test_dir("trainer_evaluation");
  const std::string file = dir + "/eval.jsonl";
  std::ofstream(file) << "{\"prompt\": \"abcdef\", \"ground_truth\": \"a\"}\n"
                         "{\"prompt\": \"ab\", \"ground_truth\": \"b\"}\n"
                         "{\"prompt\": \"cd\", \"ground_truth\": \"c\"}\n"
                         "{\"prompt\": \"ef\", \"ground_truth\": \"d\"}\n";
  const grpo::sdk::ConfigValue config = load_config(ConfigSources{
      {}, {"data.eval=[" + file + "]", "rollout.max_prompt_tokens=4", "eval.max_prompts=2", "tokenizer.chat_template=none",
           "data.shuffle=false"}});
  const TrainingJobSettings job = training_job_settings(config);
  const PromptSet eval = load_eval_prompts(config, job.data, byte_tokenizer(), job.trainer);
  ASSERT_EQ(eval.examples.size(), 2u);  // "abcdef" is too long; then the first two rows
  EXPECT_EQ(eval.texts, (std::vector<std::string>{"ab", "cd"}));
  EXPECT_EQ(eval.ids.size(), 2u);
  EXPECT_EQ(eval.examples[0].line, 2u);

  // No eval split: nothing to evaluate.
  EXPECT_TRUE(load_eval_prompts(load_config({}), DataOptions{}, byte_tokenizer(), job.trainer).examples.empty());

  // Every row too long: an error at data.eval.
  const grpo::sdk::ConfigValue tight =
      load_config(ConfigSources{{}, {"data.eval=[" + file + "]", "rollout.max_prompt_tokens=1", "tokenizer.chat_template=none"}});
  const TrainingJobSettings tight_job = training_job_settings(tight);
  const std::string msg = error_of([&] { load_eval_prompts(tight, tight_job.data, byte_tokenizer(), tight_job.trainer); });
  EXPECT_NE(msg.find("data.eval: no eval rows left after filtering"), std::string::npos) << msg;
}

}  // namespace
