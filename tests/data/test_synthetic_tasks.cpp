// The quickstart's synthetic tasks (grpo-data): seeded and reproducible, held-out problems
// disjoint from training, answers that match the numbers in the prompt (recomputed here from
// the prompt text), the imperfect teacher's errors exactly on carry/borrow problems, and rows
// that the data loader reads and the real verifiers score as intended.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "core/data/dataset.h"
#include "core/data/synthetic_tasks.h"
#include "tests/support/run_command.h"
#include "tests/support/test_dir.h"

namespace {

using grpo::core::SyntheticProblem;
using grpo::core::SyntheticTaskOptions;

SyntheticTaskOptions small(const std::string& task = "arithmetic") {
  SyntheticTaskOptions o;
  o.task = task;
  o.train_rows = 2000;
  o.sft_rows = 4000;
  o.eval_rows = 200;
  return o;
}

// The two numbers of a word problem, read from its text, and whether it takes away.
std::tuple<long, long, bool> numbers_in(const std::string& prompt) {
  static const std::regex number(R"(\b\d+\b)");
  std::vector<long> n;
  for (auto it = std::sregex_iterator(prompt.begin(), prompt.end(), number); it != std::sregex_iterator(); ++it)
    n.push_back(std::stol(it->str()));
  EXPECT_EQ(n.size(), 2u) << prompt;
  const bool minus = prompt.find("gives away") != std::string::npos || prompt.find("lost") != std::string::npos ||
                     prompt.find("takes out") != std::string::npos;
  return {n.at(0), n.at(1), minus};
}

TEST(SyntheticTasks, SolutionLinesByHand) {
  EXPECT_EQ(grpo::core::arithmetic_solution('+', 27, 5), "27+5=32 \\boxed{32}");
  EXPECT_EQ(grpo::core::arithmetic_solution('-', 42, 5), "42-5=37 \\boxed{37}");
  EXPECT_EQ(grpo::core::arithmetic_solution('+', 10, 2), "10+2=12 \\boxed{12}");
}

TEST(SyntheticTasks, SameSeedSameRowsAndHeldOutProblemsAreUnseen) {
  const auto a = grpo::core::generate_synthetic_task(small());
  const auto b = grpo::core::generate_synthetic_task(small());
  SyntheticTaskOptions other = small();
  other.seed = 2;
  const auto c = grpo::core::generate_synthetic_task(other);
  ASSERT_EQ(a.train.size(), 2000u);
  ASSERT_EQ(a.sft.size(), 4000u);
  ASSERT_EQ(a.eval.size(), 200u);
  for (std::size_t i = 0; i < a.sft.size(); ++i) ASSERT_EQ(a.sft[i].completion, b.sft[i].completion);
  for (std::size_t i = 0; i < a.eval.size(); ++i) ASSERT_EQ(a.eval[i].prompt, b.eval[i].prompt);
  bool differs = false;
  for (std::size_t i = 0; i < a.eval.size(); ++i) differs = differs || a.eval[i].prompt != c.eval[i].prompt;
  EXPECT_TRUE(differs);

  std::set<std::tuple<char, long, long>> held_out;
  for (const auto& p : a.eval) held_out.insert({p.op, p.a, p.b});
  EXPECT_EQ(held_out.size(), 200u);  // distinct problems
  for (const auto* split : {&a.train, &a.sft})
    for (const auto& p : *split) ASSERT_EQ(held_out.count({p.op, p.a, p.b}), 0u) << p.prompt;
}

TEST(SyntheticTasks, AnswersFollowThePromptAndTheTeacherErrsOnlyOnCarries) {
  SyntheticTaskOptions o = small();
  o.teacher_error_rate = 0.6;
  const auto splits = grpo::core::generate_synthetic_task(o);
  for (const auto* split : {&splits.train, &splits.eval, &splits.sft})
    for (const auto& p : *split) {
      const auto [x, y, minus] = numbers_in(p.prompt);
      ASSERT_EQ(p.answer, minus ? x - y : x + y) << p.prompt;
      ASSERT_EQ(p.carry, minus ? x % 10 < y : x % 10 + y >= 10) << p.prompt;
    }
  for (const auto& p : splits.eval)
    ASSERT_EQ(p.completion, std::to_string(p.a) + p.op + std::to_string(p.b) + "=" + std::to_string(p.answer) +
                                " \\boxed{" + std::to_string(p.answer) + "}");
  std::size_t carries = 0, sloppy = 0;
  for (const auto& p : splits.sft) {
    // The forgetful teacher keeps the tens digit and wraps the units: 27+5 -> 22, 42-5 -> 47.
    const long units = p.op == '+' ? (p.a % 10 + p.b) % 10 : (p.a % 10 + 10 - p.b) % 10;
    const long forgot = p.a / 10 * 10 + units;
    const std::string right = std::to_string(p.a) + p.op + std::to_string(p.b) + "=" + std::to_string(p.answer) +
                              " \\boxed{" + std::to_string(p.answer) + "}";
    const std::string wrong = std::to_string(p.a) + p.op + std::to_string(p.b) + "=" + std::to_string(forgot) +
                              " \\boxed{" + std::to_string(forgot) + "}";
    if (!p.carry) {
      ASSERT_EQ(p.completion, right);
      continue;
    }
    ++carries;
    ASSERT_TRUE(p.completion == right || p.completion == wrong) << p.completion;
    sloppy += p.completion == wrong ? 1 : 0;
  }
  ASSERT_GT(carries, 1000u);
  const double rate = static_cast<double>(sloppy) / static_cast<double>(carries);
  EXPECT_NEAR(rate, 0.6, 0.04) << sloppy << " of " << carries;
}

TEST(SyntheticTasks, BadOptionsNameTheOption) {
  auto message = [](SyntheticTaskOptions o) -> std::string {
    try {
      grpo::core::generate_synthetic_task(o);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  SyntheticTaskOptions o = small();
  o.task = "poetry";
  EXPECT_NE(message(o).find("task: expected arithmetic, ifeval or multiplication"), std::string::npos);
  o = small();
  o.teacher_error_rate = 1.5;
  EXPECT_NE(message(o).find("teacher_error_rate"), std::string::npos);
  o = small();
  o.eval_rows = 5000;  // more than the 1440 (op, a, b) triples
  EXPECT_NE(message(o).find("eval rows: 5000 held-out problems leave none of the 1440"), std::string::npos);
}

// The rows as files, read by the data loader and scored by the real verifiers (grpo-verify):
// the correct answers score 1, the teacher's forgotten carries 0, and in the ifeval task the
// instruction is checked by the ifeval verifier.
TEST(SyntheticTasks, RowsLoadAndTheVerifiersScoreThemAsIntended) {
  const std::string dir = grpo::testing::fresh_test_dir("synthetic");
  SyntheticTaskOptions o = small("ifeval");
  o.teacher_error_rate = 1.0;
  o.teacher_follow_rate = 0.5;
  const auto paths = grpo::core::write_synthetic_task(o, dir);
  ASSERT_EQ(paths.size(), 3u);
  grpo::core::DataOptions options;
  const auto train = grpo::core::load_jsonl(paths[0], options);
  ASSERT_EQ(train.size(), 2000u);
  ASSERT_EQ(train[0].targets.size(), 2u);
  EXPECT_EQ(train[0].targets[0].label, "math");
  EXPECT_EQ(train[0].targets[1].label, "ifeval");
  options.require_completion = true;
  const auto sft = grpo::core::load_jsonl(paths[1], options);

  // grpo-verify input: each SFT completion against its math and ifeval targets.
  const std::string input = dir + "/verify.jsonl";
  std::ofstream in(input);
  std::vector<std::pair<bool, bool>> expected;  // (math correct, instruction followed) per line pair
  const auto problems = grpo::core::generate_synthetic_task(o).sft;
  for (std::size_t i = 0; i < 200; ++i) {
    const SyntheticProblem& p = problems[i];
    in << nlohmann::json{{"completion", sft[i].completion}, {"ground_truth", nlohmann::json::parse(sft[i].targets[0].ground_truth)},
                         {"verifier", "math"}}.dump() << "\n";
    in << nlohmann::json{{"completion", sft[i].completion}, {"ground_truth", nlohmann::json::parse(sft[i].targets[1].ground_truth)},
                         {"verifier", "ifeval"}}.dump() << "\n";
    // The instruction is followed when the completion carries the form the instruction asks for.
    const std::string& c = p.completion;
    bool followed = false;
    if (p.instruction_id == "startend:quotation") followed = c.front() == '"' && c.back() == '"';
    if (p.instruction_id == "detectable_format:title") followed = c.rfind("<<Sum>>", 0) == 0;
    if (p.instruction_id == "startend:end_checker") followed = c.size() > 5 && c.substr(c.size() - 5) == "Done.";
    if (p.instruction_id == "detectable_content:postscript") followed = c.find("P.S.") != std::string::npos;
    expected.emplace_back(!p.carry, followed);  // error rate 1: every carry problem is answered wrong
  }
  in.close();
  const auto r = grpo::testing::run_command(std::string(GRPO_VERIFY_BINARY) + " --input " + input +
                                            " --plugin-path " + GRPO_PLUGIN_BUILD_DIR + " 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream out(r.output);
  std::size_t i = 0, followed = 0;
  for (std::string line; std::getline(out, line); ++i) {
    const double score = nlohmann::json::parse(line).at("score").get<double>();
    const auto& [math_ok, instruction_ok] = expected[i / 2];
    if (i % 2 == 0) ASSERT_EQ(score, math_ok ? 1.0 : 0.0) << "line " << i << ": " << problems[i / 2].completion;
    else ASSERT_EQ(score, instruction_ok ? 1.0 : 0.0) << "line " << i << ": " << problems[i / 2].completion;
    followed += (i % 2 == 1 && instruction_ok) ? 1 : 0;
  }
  EXPECT_EQ(i, 400u);
  EXPECT_GT(followed, 60u);  // both kinds occur (follow rate 0.5)
  EXPECT_LT(followed, 140u);
}

}  // namespace

// The tool demo's task: factors of the requested digit counts, correct products, the teacher's
// calculator answers at the requested rate (the observation written as the calculator and
// the legacy parser produce it), estimates otherwise; held-out rows carry the tool answer.
TEST(SyntheticTasks, MultiplicationTeacherCallsTheCalculatorAtItsRate) {
  // 48213 * 5720 = 241065000 + 34713360 = 275778360 (by hand).
  EXPECT_EQ(grpo::core::multiplication_tool_solution(48213, 5720),
            "<calculator>48213*5720</calculator><output>\n275778360\n</output>\n\\boxed{275778360}");
  SyntheticTaskOptions o;
  o.task = "multiplication";
  o.train_rows = 100;
  o.sft_rows = 4000;
  o.eval_rows = 50;
  o.teacher_tool_rate = 0.3;
  o.min_digits = 4;
  o.max_digits = 6;
  const auto splits = grpo::core::generate_synthetic_task(o);
  std::size_t tool = 0;
  for (const auto& p : splits.sft) {
    EXPECT_EQ(p.answer, p.a * p.b);
    for (std::int64_t f : {p.a, p.b}) {
      EXPECT_GE(f, 1000);
      EXPECT_LE(f, 999999);
    }
    EXPECT_EQ(p.prompt, "What is " + std::to_string(p.a) + " * " + std::to_string(p.b) + "?\n");
    if (p.completion.rfind("<calculator>", 0) == 0) {
      ++tool;
      EXPECT_EQ(p.completion, grpo::core::multiplication_tool_solution(p.a, p.b));
    } else {
      EXPECT_EQ(p.completion.rfind(std::to_string(p.a) + "*" + std::to_string(p.b) + "=", 0), 0u) << p.completion;
    }
  }
  EXPECT_NEAR(static_cast<double>(tool) / 4000.0, 0.3, 0.03);
  for (const auto& p : splits.eval) EXPECT_EQ(p.completion, grpo::core::multiplication_tool_solution(p.a, p.b));
  // The estimate: 3 significant digits, "1803*50992=91900000" (91,938,576 rounded).
  o.min_digits = o.max_digits = 1;
  o.teacher_tool_rate = 0.0;
  for (const auto& p : grpo::core::generate_synthetic_task(o).sft)
    EXPECT_EQ(p.completion, std::to_string(p.a) + "*" + std::to_string(p.b) + "=" + std::to_string(p.a * p.b) + " \\boxed{" +
                                std::to_string(p.a * p.b) + "}")
        << "a product of at most 2 digits is its own estimate";
  o.max_digits = 12;
  EXPECT_THROW(grpo::core::generate_synthetic_task(o), std::invalid_argument);
}
