#include "apps/grpo-data/grpo_data.h"

#include <boost/program_options.hpp>

#include <iostream>

#include "apps/cli/app_common.h"
#include "core/data/synthetic_tasks.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_files.h"

namespace grpo::cli {

using namespace grpo::core;

namespace {

namespace po = boost::program_options;

constexpr const char* kUsage = R"(Usage: grpo-data TASK --output DIR [options]

Writes a synthetic verifiable task for the quickstart: DIR/train.jsonl (RL prompts with ground
truths), DIR/sft.jsonl (the same kind of prompts with a teacher's completion, for grpo-sft) and
DIR/eval.jsonl (held-out problems: (operation, a, b) triples that occur in no other split).
The same options and seed always write the same files.

TASK:
  arithmetic  one-step word problems, answers as "27+5=32 \boxed{32}", scored by `math`
              (TRL rows: prompt, completion, ground_truth)
  ifeval      the same problems with a formatting instruction ("Wrap your whole answer in
              double quotes."), scored by `math` and `ifeval` (open-instruct rows with
              aligned ground truths)
  multiplication  "What is 48213 * 5720?" with factors of 4-6 digits, for the tool demo
              (`make demo TASK=tools`, docs/tools.md): the teacher calls the calculator
              ("<calculator>48213*5720</calculator><output>...</output>\boxed{...}") with
              probability --teacher-tool-rate and otherwise guesses from an estimate
  tokenizer   not a task: writes DIR/tokenizer.json + tokenizer_config.json, a byte-level BPE
              tokenizer (any text encodes; 256 byte tokens, <|endoftext|>, <|im_start|>,
              <|im_end|>) with --merges merges learned from the words of both tasks, so that
              their prompts take about a third of the tokens (configs/quickstart/model/)

The SFT teacher is deliberately imperfect: it forgets the carry (or borrow) with probability
--teacher-error-rate on problems that have one, and follows the ifeval instruction with
probability --teacher-follow-rate. docs/quickstart.md explains why.

Options)";

}  // namespace

int grpo_data_main(int argc, char** argv) {
  SyntheticTaskOptions o;
  std::string output;
  std::size_t merges = 256;
  bool show_help = false;
  po::options_description desc(kUsage);
  // clang-format off
  desc.add_options()
    ("help,h", po::bool_switch(&show_help), "show this help")
    ("task", po::value(&o.task), "arithmetic, ifeval or multiplication (also the first positional argument)")
    ("output,o", po::value(&output), "output folder (created)")
    ("train", po::value(&o.train_rows)->default_value(o.train_rows), "RL training prompts")
    ("sft", po::value(&o.sft_rows)->default_value(o.sft_rows), "supervised rows (prompt + teacher completion)")
    ("eval", po::value(&o.eval_rows)->default_value(o.eval_rows), "held-out problems")
    ("seed", po::value(&o.seed)->default_value(o.seed), "seed of every draw")
    ("teacher-error-rate", po::value(&o.teacher_error_rate)->default_value(o.teacher_error_rate),
     "probability that an SFT answer forgets the carry/borrow of a problem that has one")
    ("teacher-follow-rate", po::value(&o.teacher_follow_rate)->default_value(o.teacher_follow_rate),
     "ifeval: probability that an SFT answer follows the instruction")
    ("teacher-tool-rate", po::value(&o.teacher_tool_rate)->default_value(o.teacher_tool_rate),
     "multiplication: probability that an SFT answer calls the calculator")
    ("min-digits", po::value(&o.min_digits)->default_value(o.min_digits), "multiplication: fewest digits of a factor")
    ("max-digits", po::value(&o.max_digits)->default_value(o.max_digits), "multiplication: most digits of a factor")
    ("min-a", po::value(&o.min_a)->default_value(o.min_a), "smallest first operand (>= 10)")
    ("max-a", po::value(&o.max_a)->default_value(o.max_a), "largest first operand")
    ("min-b", po::value(&o.min_b)->default_value(o.min_b), "smallest second operand (>= 1)")
    ("max-b", po::value(&o.max_b)->default_value(o.max_b), "largest second operand (<= 9)")
    ("merges", po::value(&merges)->default_value(merges), "tokenizer: BPE merges to learn (fewer when the words run out)");
  // clang-format on
  po::positional_options_description positional;
  positional.add("task", 1);
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).positional(positional).run(), vm);
    po::notify(vm);
    if (show_help) {
      std::cout << desc << exit_codes_help({{kExitOk, "the files were written"}, {kExitInternal}, {kExitUsage}});
      return kExitOk;
    }
    if (!vm.count("task")) throw po::error("a TASK is required (arithmetic, ifeval, multiplication or tokenizer)");
    if (output.empty()) throw po::error("--output is required");
  } catch (const po::error& e) {
    return report_usage_error("grpo-data", e.what());
  }
  return run_app_guarded("grpo-data", [&] {
    if (o.task == "tokenizer") {
      std::vector<std::string> texts;
      for (const char* task : {"arithmetic", "ifeval"}) {
        SyntheticTaskOptions t = o;
        t.task = task;
        const SyntheticSplits splits = generate_synthetic_task(t);
        for (const auto* split : {&splits.train, &splits.sft, &splits.eval})
          for (const auto& p : *split) {
            texts.push_back(p.prompt);
            texts.push_back(p.completion);
          }
      }
      const Tokenizer tokenizer = Tokenizer::from_json(make_byte_level_tokenizer_json(default_demo_special_tokens(), train_bpe_merges(texts, merges)));
      TokenizerFilesOptions files;
      files.chat_templates = std::vector<NamedChatTemplate>{{"default", chat_template_jinja("none")}};
      files.eos_token = "<|endoftext|>";
      files.pad_token = "<|endoftext|>";
      write_tokenizer_files(output, tokenizer, files);
      std::cout << "grpo-data: tokenizer with " << tokenizer.vocab_size() << " ids in " << output << "\n";
      return kExitOk;
    }
    const auto paths = write_synthetic_task(o, output);
    std::cout << "grpo-data: " << o.task << " (seed " << o.seed << "): " << o.train_rows << " train, " << o.sft_rows
              << " sft, " << o.eval_rows << " held-out rows\n";
    for (const auto& p : paths) std::cout << "  " << p << "\n";
    return kExitOk;
  });
}

}  // namespace grpo::cli
