// Synthetic verifiable tasks for the quickstart (`grpo-data`): seeded generators of train,
// supervised (SFT) and held-out splits as JSONL in the TRL / open-instruct conventions that
// core/data/dataset.h reads. Torch-free.
//
// `arithmetic`: one-step word problems ("Ann has 27 pens. She gets 5 more. How many pens does
// she have now?"), answer "27+5=32 \boxed{32}", scored by the `math` verifier. The SFT split
// comes from a deliberately imperfect teacher that forgets the carry (addition) or the borrow
// (subtraction) with probability `teacher_error_rate`: a model trained on it answers those
// problems wrong when decoding greedily, and only the verifier's reward can fix it.
//
// `ifeval`: the same problems with one formatting instruction appended ("Wrap your whole answer
// in double quotes."), scored by `math` and `ifeval` together (open-instruct rows with aligned
// ground truths); the teacher follows the instruction with probability `teacher_follow_rate`.
//
// `multiplication`: the tool demo (`make demo TASK=tools`, docs/tools.md): "What is 48213 *
// 5720?" with two factors of 4 to 6 digits, answer "\boxed{275778360}", scored by `math`; far
// beyond what the demo-sized model can compute in its head. The SFT teacher calls the
// calculator (open-instruct's legacy tool format:
// "<calculator>48213*5720</calculator><output>\n275778360\n</output>\n\boxed{275778360}",
// the observation written as the tool would answer) with probability `teacher_tool_rate`, and
// otherwise answers from an estimate (the product to 3 significant digits: "48213*5720=276000000
// \boxed{276000000}"), so that a model trained on it rarely calls the tool and only the
// verifier's reward teaches it to.
//
// Held-out problems are (operation, a, b) triples that never occur in the train or SFT splits,
// so evaluation measures arithmetic on unseen problems, not recall of seen ones.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace grpo::core {

struct SyntheticTaskOptions {
  std::string task = "arithmetic";  // arithmetic | ifeval | multiplication
  std::int64_t train_rows = 20000;   // RL prompts
  std::int64_t sft_rows = 20000;     // supervised rows (prompt + teacher completion)
  std::int64_t eval_rows = 400;      // held-out prompts (distinct triples)
  std::uint64_t seed = 1;
  double teacher_error_rate = 0.6;   // P(the teacher drops a carry/borrow) on problems that have one
  double teacher_follow_rate = 0.5;  // ifeval: P(the teacher follows the instruction)
  double teacher_tool_rate = 0.3;    // multiplication: P(the teacher calls the calculator)
  std::int64_t min_digits = 4, max_digits = 6;  // multiplication: digits of each factor
  std::int64_t min_a = 10, max_a = 99;  // first operand
  std::int64_t min_b = 2, max_b = 9;    // second operand
};

// One generated problem.
struct SyntheticProblem {
  char op = '+';           // '+', '-' or '*'
  std::int64_t a = 0, b = 0;
  std::int64_t answer = 0;
  bool carry = false;      // the units overflow (addition) or borrow (subtraction)
  std::string prompt;      // the word problem (and, for ifeval, the instruction)
  std::string completion;  // SFT rows: the teacher's answer; held-out rows: the correct one; else ""
  std::string instruction_id;      // ifeval: the IFEval instruction id, else ""
  std::string instruction_kwargs;  // ifeval: its kwargs as a JSON object text
};

struct SyntheticSplits {
  std::vector<SyntheticProblem> train, sft, eval;
};

// Throws std::invalid_argument naming the option when options are out of range (e.g. more
// held-out triples than exist, rates outside [0, 1], min > max).
SyntheticSplits generate_synthetic_task(const SyntheticTaskOptions& options);

// The correct answer line, "27+5=32 \boxed{32}".
std::string arithmetic_solution(char op, std::int64_t a, std::int64_t b);

// The multiplication task's tool-calling answer (the observation included, as the calculator
// and the legacy parser produce it): "<calculator>A*B</calculator><output>\nP\n</output>\n\boxed{P}".
std::string multiplication_tool_solution(std::int64_t a, std::int64_t b);

// One JSONL row. `with_completion` adds the completion (the SFT split: the teacher's; the
// held-out split: the correct answer, which grpo-sft's eval loss uses and grpo-run ignores).
// arithmetic: TRL {"prompt", ["completion"], "ground_truth", "op", "a", "b", "carry"};
// multiplication: TRL {"prompt", ["completion"], "ground_truth", "a", "b"}.
// ifeval: open-instruct {"messages": [user (, assistant)], "ground_truth": [answer, ifeval
// ground truth], "dataset": ["math", "ifeval"], ...}.
std::string synthetic_row_json(const SyntheticProblem& problem, const std::string& task, bool with_completion);

// Writes DIR/train.jsonl (no completions), DIR/sft.jsonl and DIR/eval.jsonl (with
// completions), each atomically, and returns their paths in that order.
std::vector<std::string> write_synthetic_task(const SyntheticTaskOptions& options, const std::string& dir);

}  // namespace grpo::core
