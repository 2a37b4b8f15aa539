#include "core/data/synthetic_tasks.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <random>
#include <stdexcept>

#include "core/data/dataset.h"
#include "core/util/fs.h"

namespace grpo::core {

namespace {

using json = nlohmann::ordered_json;

struct Person {
  const char* name;
  const char* pronoun;  // "She" / "He"
};

constexpr Person kPeople[] = {{"Ann", "She"}, {"Ben", "He"},   {"Cara", "She"}, {"Dan", "He"},  {"Eva", "She"},
                              {"Finn", "He"}, {"Gina", "She"}, {"Hugo", "He"},  {"Ivy", "She"}, {"Jack", "He"}};
constexpr const char* kObjects[] = {"apples", "pens", "books", "coins", "cards", "shells", "stamps", "marbles"};

// {N} name, {P} pronoun, {p} lower-case pronoun, {O} object, {A} a, {B} b.
constexpr const char* kAddTemplates[] = {
    "{N} has {A} {O}. {P} gets {B} more. How many {O} does {p} have now?",
    "{N} had {A} {O} and found {B} more. How many {O} does {N} have?",
    "There are {A} {O} in a box. {N} puts in {B} more. How many {O} are in the box?",
};
constexpr const char* kSubTemplates[] = {
    "{N} has {A} {O}. {P} gives away {B}. How many {O} are left?",
    "{N} had {A} {O} and lost {B}. How many {O} does {N} have now?",
    "There are {A} {O} in a box. {N} takes out {B}. How many {O} are in the box?",
};

// One formatting instruction of the ifeval task: what the prompt says, the IFEval id and
// kwargs the verifier checks, and how a following answer is written.
struct Instruction {
  const char* sentence;
  const char* id;
  const char* kwargs;  // JSON object
  const char* prefix;
  const char* suffix;
};
constexpr Instruction kInstructions[] = {
    {"Wrap your whole answer in double quotes.", "startend:quotation", "{}", "\"", "\""},
    {"Start with a title in double angular brackets, like <<title>>.", "detectable_format:title", "{}", "<<Sum>> ",
     ""},
    {"End your answer with the phrase Done.", "startend:end_checker", "{\"end_phrase\": \"Done.\"}", "", " Done."},
    {"Add a postscript starting with P.S. at the end.", "detectable_content:postscript",
     "{\"postscript_marker\": \"P.S.\"}", "", "\nP.S. Easy."},
};

std::string fill(std::string t, const Person& who, const char* object, std::int64_t a, std::int64_t b) {
  const std::string lower_pronoun = std::string(1, static_cast<char>(who.pronoun[0] - 'A' + 'a')) + (who.pronoun + 1);
  const std::pair<const char*, std::string> subs[] = {{"{N}", who.name},          {"{P}", who.pronoun},
                                                      {"{p}", lower_pronoun},     {"{O}", object},
                                                      {"{A}", std::to_string(a)}, {"{B}", std::to_string(b)}};
  for (const auto& [key, value] : subs)
    for (std::size_t pos = t.find(key); pos != std::string::npos; pos = t.find(key, pos + value.size()))
      t.replace(pos, std::string(key).size(), value);
  return t;
}

template <class T, std::size_t N>
const T& pick(const T (&items)[N], std::mt19937_64& gen) {
  return items[uniform_below(gen, N)];
}

// P(true) = p from 53 random bits (portable).
bool bernoulli(std::mt19937_64& gen, double p) { return static_cast<double>(gen() >> 11) * 0x1.0p-53 < p; }

struct Triple {
  char op;
  std::int64_t a, b;
};

bool has_carry(char op, std::int64_t a, std::int64_t b) { return op == '+' ? a % 10 + b >= 10 : a % 10 < b; }

// The teacher's answer when it forgets the carry or borrow: the tens stay, the units wrap.
std::int64_t sloppy_answer(char op, std::int64_t a, std::int64_t b) {
  const std::int64_t units = op == '+' ? (a % 10 + b) % 10 : (a % 10 - b + 10) % 10;
  return a - a % 10 + units;
}

std::string solution_line(char op, std::int64_t a, std::int64_t b, std::int64_t result) {
  return std::to_string(a) + op + std::to_string(b) + "=" + std::to_string(result) + " \\boxed{" +
         std::to_string(result) + "}";
}

// kTeacher: the imperfect teacher's answer (SFT); kReference: the correct, instruction-following
// answer (the held-out split's, for grpo-sft's eval loss).
enum class CompletionKind { kNone, kTeacher, kReference };

SyntheticProblem make_problem(const Triple& t, const SyntheticTaskOptions& o, CompletionKind kind, std::mt19937_64& gen) {
  SyntheticProblem p;
  p.op = t.op;
  p.a = t.a;
  p.b = t.b;
  p.answer = t.op == '+' ? t.a + t.b : t.a - t.b;
  p.carry = has_carry(t.op, t.a, t.b);
  const Person& who = pick(kPeople, gen);
  const char* object = pick(kObjects, gen);
  p.prompt = t.op == '+' ? fill(pick(kAddTemplates, gen), who, object, t.a, t.b)
                         : fill(pick(kSubTemplates, gen), who, object, t.a, t.b);
  const Instruction* instruction = nullptr;
  if (o.task == "ifeval") {
    instruction = &pick(kInstructions, gen);
    p.prompt += std::string(" ") + instruction->sentence;
    p.instruction_id = instruction->id;
    p.instruction_kwargs = instruction->kwargs;
  }
  p.prompt += "\n";  // the answer starts on its own line (prompts are plain text: chat template none)
  if (kind == CompletionKind::kTeacher) {
    const bool sloppy = p.carry && bernoulli(gen, o.teacher_error_rate);
    p.completion = solution_line(t.op, t.a, t.b, sloppy ? sloppy_answer(t.op, t.a, t.b) : p.answer);
    if (instruction && bernoulli(gen, o.teacher_follow_rate))
      p.completion = instruction->prefix + p.completion + instruction->suffix;
  } else if (kind == CompletionKind::kReference) {
    p.completion = solution_line(t.op, t.a, t.b, p.answer);
    if (instruction) p.completion = instruction->prefix + p.completion + instruction->suffix;
  }
  return p;
}

std::int64_t pow10(std::int64_t n) {
  std::int64_t p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

// The product to 3 significant digits: what the teacher writes without the calculator.
std::int64_t estimate(std::int64_t product) {
  std::int64_t scale = 1;
  while (product / scale >= 1000) scale *= 10;
  return (product + scale / 2) / scale * scale;
}

// One plain question: the demo is about learning to call the tool, and a tiny model copies
// numbers out of one fixed sentence far sooner than out of varied word problems.
constexpr const char* kMultiplyTemplates[] = {"What is {A} * {B}?"};

SyntheticSplits generate_multiplication(const SyntheticTaskOptions& o) {
  SyntheticSplits out;
  std::mt19937_64 gen(o.seed * 0x9E3779B97F4A7C15ULL + 0x70015);
  auto factor = [&] {
    const std::int64_t digits = o.min_digits + static_cast<std::int64_t>(uniform_below(gen, static_cast<std::size_t>(o.max_digits - o.min_digits + 1)));
    const std::int64_t lo = pow10(digits - 1), hi = pow10(digits) - 1;
    return lo + static_cast<std::int64_t>(uniform_below(gen, static_cast<std::size_t>(hi - lo + 1)));
  };
  auto problem = [&](CompletionKind kind) {
    SyntheticProblem p;
    p.op = '*';
    p.a = factor();
    p.b = factor();
    p.answer = p.a * p.b;
    p.prompt = fill(pick(kMultiplyTemplates, gen), pick(kPeople, gen), pick(kObjects, gen), p.a, p.b) + "\n";
    if (kind == CompletionKind::kReference || (kind == CompletionKind::kTeacher && bernoulli(gen, o.teacher_tool_rate))) {
      p.completion = multiplication_tool_solution(p.a, p.b);
    } else if (kind == CompletionKind::kTeacher) {
      const std::int64_t guess = estimate(p.answer);
      p.completion = std::to_string(p.a) + "*" + std::to_string(p.b) + "=" + std::to_string(guess) + " \\boxed{" +
                     std::to_string(guess) + "}";
    }
    return p;
  };
  // Factors are drawn from ~10^12 pairs: held-out problems do not recur in the other splits.
  for (std::int64_t i = 0; i < o.eval_rows; ++i) out.eval.push_back(problem(CompletionKind::kReference));
  for (std::int64_t i = 0; i < o.train_rows; ++i) out.train.push_back(problem(CompletionKind::kNone));
  for (std::int64_t i = 0; i < o.sft_rows; ++i) out.sft.push_back(problem(CompletionKind::kTeacher));
  return out;
}

void check_options(const SyntheticTaskOptions& o) {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  if (o.task != "arithmetic" && o.task != "ifeval" && o.task != "multiplication")
    bad("task: expected arithmetic, ifeval or multiplication, got '" + o.task + "'");
  if (o.task == "multiplication") {
    if (o.min_digits < 1 || o.max_digits > 9 || o.min_digits > o.max_digits)
      bad("digits: expected 1 <= min_digits <= max_digits <= 9, got " + std::to_string(o.min_digits) + ".." +
          std::to_string(o.max_digits));
    if (!(o.teacher_tool_rate >= 0.0 && o.teacher_tool_rate <= 1.0)) bad("teacher_tool_rate: expected a probability in [0, 1]");
    if (o.train_rows < 1 || o.sft_rows < 0 || o.eval_rows < 1) bad("row counts: expected train >= 1, sft >= 0, eval >= 1");
    return;
  }
  if (o.min_a < 10 || o.max_a > 999999 || o.min_a > o.max_a)
    bad("a range: expected 10 <= min_a <= max_a <= 999999, got " + std::to_string(o.min_a) + ".." +
        std::to_string(o.max_a));
  if (o.min_b < 1 || o.max_b > 9 || o.min_b > o.max_b)
    bad("b range: expected 1 <= min_b <= max_b <= 9, got " + std::to_string(o.min_b) + ".." + std::to_string(o.max_b));
  if (o.train_rows < 1 || o.sft_rows < 0 || o.eval_rows < 1)
    bad("row counts: expected train >= 1, sft >= 0, eval >= 1");
  for (const auto& [name, rate] : {std::pair<const char*, double>{"teacher_error_rate", o.teacher_error_rate},
                                   {"teacher_follow_rate", o.teacher_follow_rate}})
    if (!(rate >= 0.0 && rate <= 1.0)) bad(std::string(name) + ": expected a probability in [0, 1]");
}

}  // namespace

std::string arithmetic_solution(char op, std::int64_t a, std::int64_t b) {
  return solution_line(op, a, b, op == '+' ? a + b : a - b);
}

std::string multiplication_tool_solution(std::int64_t a, std::int64_t b) {
  const std::string product = std::to_string(a * b);
  return "<calculator>" + std::to_string(a) + "*" + std::to_string(b) + "</calculator><output>\n" + product +
         "\n</output>\n\\boxed{" + product + "}";
}

SyntheticSplits generate_synthetic_task(const SyntheticTaskOptions& o) {
  check_options(o);
  if (o.task == "multiplication") return generate_multiplication(o);
  std::vector<Triple> triples;
  for (char op : {'+', '-'})
    for (std::int64_t a = o.min_a; a <= o.max_a; ++a)
      for (std::int64_t b = o.min_b; b <= o.max_b; ++b) triples.push_back({op, a, b});
  if (static_cast<std::size_t>(o.eval_rows) >= triples.size())
    throw std::invalid_argument("eval rows: " + std::to_string(o.eval_rows) + " held-out problems leave none of the " +
                                std::to_string(triples.size()) + " (operation, a, b) triples for training");
  // A seeded permutation of the triples: the first eval_rows are held out.
  const std::vector<std::size_t> order = PromptSampler(triples.size(), o.seed, true).epoch_order(0);
  std::vector<Triple> held_out, seen;
  for (std::size_t i = 0; i < order.size(); ++i)
    (i < static_cast<std::size_t>(o.eval_rows) ? held_out : seen).push_back(triples[order[i]]);

  SyntheticSplits out;
  std::mt19937_64 gen(o.seed * 0x9E3779B97F4A7C15ULL + 0x5157);
  for (const Triple& t : held_out) out.eval.push_back(make_problem(t, o, CompletionKind::kReference, gen));
  for (std::int64_t i = 0; i < o.train_rows; ++i)
    out.train.push_back(make_problem(seen[uniform_below(gen, seen.size())], o, CompletionKind::kNone, gen));
  for (std::int64_t i = 0; i < o.sft_rows; ++i)
    out.sft.push_back(make_problem(seen[uniform_below(gen, seen.size())], o, CompletionKind::kTeacher, gen));
  return out;
}

std::string synthetic_row_json(const SyntheticProblem& p, const std::string& task, bool with_completion) {
  json row;
  const std::string answer = std::to_string(p.answer);
  if (task == "ifeval") {
    json messages = json::array({{{"role", "user"}, {"content", p.prompt}}});
    if (with_completion) messages.push_back({{"role", "assistant"}, {"content", p.completion}});
    row["messages"] = std::move(messages);
    json ifeval_truth = {{"instruction_id", json::array({p.instruction_id})},
                         {"kwargs", json::array({json::parse(p.instruction_kwargs)})}};
    row["ground_truth"] = json::array({answer, std::move(ifeval_truth)});
    row["dataset"] = json::array({"math", "ifeval"});
  } else {
    row["prompt"] = p.prompt;
    if (with_completion) row["completion"] = p.completion;
    row["ground_truth"] = answer;
  }
  if (task != "multiplication") row["op"] = std::string(1, p.op);
  row["a"] = p.a;
  row["b"] = p.b;
  if (task != "multiplication") row["carry"] = p.carry;
  return row.dump();
}

std::vector<std::string> write_synthetic_task(const SyntheticTaskOptions& options, const std::string& dir) {
  const SyntheticSplits splits = generate_synthetic_task(options);
  std::filesystem::create_directories(dir);
  std::vector<std::string> paths;
  auto write = [&](const char* name, const std::vector<SyntheticProblem>& rows, bool with_completion) {
    std::string text;
    for (const auto& p : rows) text += synthetic_row_json(p, options.task, with_completion) + "\n";
    const std::string path = (std::filesystem::path(dir) / name).string();
    atomic_write_file(path, text);
    paths.push_back(path);
  };
  write("train.jsonl", splits.train, false);
  write("sft.jsonl", splits.sft, true);
  write("eval.jsonl", splits.eval, true);
  return paths;
}

}  // namespace grpo::core
