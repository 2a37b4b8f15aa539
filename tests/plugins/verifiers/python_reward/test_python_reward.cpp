// The python_reward verifier, loaded from the build's plugin folder and driven through the
// trainer's VerifierPool (batching, routing by label, unbounded scores, failures) the way a run
// drives it. Reward functions and the yardstick are tests/fixtures/verifiers/python_reward/:
// call_directly.py calls each function the way TRL / verl / the plain convention call it,
// written without reading the plugin; every score must equal what that direct call returns.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/runtime/components.h"
#include "core/train/verifier_pool.h"
#include "grpo/sdk/config_view.h"
#include "tests/support/build_plugins.h"
#include "tests/support/processes.h"

namespace {

namespace fs = std::filesystem;
using grpo::core::Group;
using grpo::core::RewardOptions;
using grpo::core::Sample;
using grpo::core::VerificationTarget;
using grpo::core::VerifierPool;
using grpo::core::VerifierSlot;
using grpo::sdk::ConfigValue;
using json = nlohmann::json;
using ::testing::HasSubstr;
using grpo::testing::marker_process_appears;
using grpo::testing::marker_process_gone;

const std::string kFixtures = GRPO_PYTHON_REWARD_FIXTURES;
const char* kPython = "/usr/bin/python3";  // readable by the sandbox's unprivileged user

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fresh folder of its own, so that the processes of one test can be told apart by path.
std::string fresh_dir(const std::string& tag) {
  std::string pattern = (fs::temp_directory_path() / ("grpo-pyreward-" + tag + "-XXXXXX")).string();
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  fs::permissions(pattern, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                               fs::perms::others_read | fs::perms::others_exec);
  return pattern;
}

// `source` as `file` in a fresh folder; returns its path.
std::string reward_file(const std::string& tag, const std::string& file, const std::string& source) {
  const std::string dir = fresh_dir(tag);
  std::ofstream(dir + "/" + file) << source;
  fs::permissions(dir + "/" + file, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                                        fs::perms::others_read);
  return dir + "/" + file;
}

// A row as cases.json holds one ({prompt, completion, ground_truth, label, columns}).
json make_row(const std::string& completion, const json& ground_truth = 1, const std::string& label = "",
              const json& columns = json::object()) {
  return json{{"prompt", "p"}, {"completion", completion}, {"ground_truth", ground_truth}, {"label", label},
              {"columns", columns}};
}

// The fixture `file` copied into a fresh folder (readable by every user, for the sandbox).
std::string fixture_copy(const std::string& file, const std::string& tag) {
  return reward_file(tag, file, read_file(kFixtures + "/" + file));
}

struct Option {
  std::string key;
  ConfigValue value;
};
ConfigValue scalar(const std::string& s) { return ConfigValue::make_scalar(s, {}, true); }
ConfigValue list(const std::vector<std::string>& items) {
  ConfigValue v = ConfigValue::make_sequence();
  for (const auto& i : items) v.items().push_back(scalar(i));
  return v;
}

// A python_reward entry as a config would hold it (python and small limits by default).
ConfigValue entry(std::vector<Option> options) {
  ConfigValue node = ConfigValue::make_map();
  node.set("name", scalar("python_reward"), {});
  auto has = [&](const char* k) {
    for (const auto& o : options)
      if (o.key == k) return true;
    return false;
  };
  if (!has("python")) options.push_back({"python", scalar(kPython)});
  if (!has("workers")) options.push_back({"workers", scalar("2")});
  if (!has("timeout_s")) options.push_back({"timeout_s", scalar("5")});
  for (const auto& o : options) node.set(o.key, o.value, {});
  return node;
}

VerifierSlot make_slot(const ConfigValue& node, const std::string& key_path = "verifiers[0]") {
  return grpo::core::create_verifier_slot(grpo::testing::build_plugin_registry(), "python_reward", &node, key_path);
}

// The sdk::ConfigError (or PluginError) message creating `node` throws; "" when none.
std::string creation_error(const ConfigValue& node) {
  try {
    make_slot(node);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// A fixture row (cases.json): {prompt, completion, ground_truth, label, columns}.
Group group_of(const json& row) {
  Group g;
  g.example.source = "cases.json";
  g.example.text = row["prompt"].get<std::string>();
  g.example.targets.push_back(VerificationTarget{row["label"].get<std::string>(), row["ground_truth"].dump()});
  g.example.metadata = row.value("columns", json::object()).dump();
  Sample s;
  s.text = row["completion"].get<std::string>();
  g.samples.push_back(s);
  return g;
}

// Scores `rows` with `slots` through a VerifierPool: the verdicts of each row's one sample.
std::vector<std::vector<grpo::core::VerifierVerdict>> score_rows(const std::vector<json>& rows,
                                                                 const std::vector<VerifierSlot>& slots,
                                                                 double pool_timeout_s = 60.0) {
  std::vector<Group> groups;
  std::vector<std::string> prompts;
  for (const auto& row : rows) {
    groups.push_back(group_of(row));
    prompts.push_back(row["prompt"].get<std::string>());
  }
  RewardOptions options;
  options.verification_reward = 1.0;
  VerifierPool pool(2, pool_timeout_s);
  pool.score(groups, prompts, slots, options);
  std::vector<std::vector<grpo::core::VerifierVerdict>> out;
  for (const auto& g : groups) out.push_back(g.samples[0].verdicts);
  return out;
}

// What call_directly.py (the independent yardstick) returns for one case.
json direct_call(json one_case, const std::string& tag) {
  const std::string dir = fresh_dir(tag);
  one_case["path"] = kFixtures + "/" + one_case["path"].get<std::string>();
  std::ofstream(dir + "/case.json") << one_case.dump();
  const std::string cmd = std::string(kPython) + " " + kFixtures + "/call_directly.py " + dir + "/case.json";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (std::size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << cmd;
  fs::remove_all(dir);
  return json::parse(out);
}

// ------------------------------------------------------------------------------ parity

class PythonRewardParity : public ::testing::TestWithParam<std::string> {};

TEST_P(PythonRewardParity, ScoresEqualDirectCallsOnTheSameRows) {
  const json cases = json::parse(read_file(kFixtures + "/cases.json"))["cases"];
  json the_case;
  for (const auto& c : cases)
    if (c["name"] == GetParam()) the_case = c;
  ASSERT_FALSE(the_case.is_null()) << GetParam();
  const json expected = direct_call(the_case, "direct");
  const std::vector<json> rows(the_case["rows"].begin(), the_case["rows"].end());
  ASSERT_EQ(expected.size(), rows.size());

  // Batches of 4 over 2 workers: rows of one case are split across batches and workers.
  std::set<std::string> labels;
  for (const auto& r : rows)
    if (!r["label"].get<std::string>().empty()) labels.insert(r["label"]);
  std::vector<std::string> label_list(labels.begin(), labels.end());
  ConfigValue node = entry({{"path", scalar(kFixtures + "/" + the_case["path"].get<std::string>())},
                            {"function", scalar(the_case["function"])},
                            {"signature", scalar(the_case["signature"])},
                            {"batch_size", scalar("4")}});
  if (!label_list.empty()) node.set("label", list(label_list), {});
  const VerifierSlot slot = make_slot(node);
  EXPECT_EQ(slot.score_range, grpo::sdk::ScoreRange::kUnbounded);
  EXPECT_EQ(slot.concurrent_calls, 8u);

  const auto verdicts = score_rows(rows, {slot});
  for (std::size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE("row " + std::to_string(i) + ": " + rows[i].dump());
    ASSERT_EQ(verdicts[i].size(), 1u);
    const auto& v = verdicts[i][0];
    const json& want = expected[i];
    if (want.is_number()) {
      EXPECT_FALSE(v.failed) << v.details;
      EXPECT_EQ(v.score, want.get<double>());  // both sides parse Python's repr of the same float
    } else if (want.is_null()) {  // TRL None: not applicable, not a failure
      EXPECT_FALSE(v.failed) << v.details;
      EXPECT_EQ(v.score, 0.0);
      EXPECT_THAT(v.details, HasSubstr("not_applicable"));
    } else if (want.is_object() && want.contains("error")) {
      EXPECT_TRUE(v.failed);
      EXPECT_THAT(v.details, HasSubstr(want["error"].get<std::string>().substr(0, want["error"].get<std::string>().find(':'))));
    } else {
      ADD_FAILURE() << "unexpected reference value " << want.dump();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, PythonRewardParity,
                         ::testing::Values("plain_match_and_length", "plain_word_overlap", "verl_compute_score",
                                           "verl_compute_score_dict", "trl_graded_or_skipped", "trl_strict_aligned",
                                           "trl_mixed_columns"));

TEST(PythonReward, VerlDictKeysBesidesScoreAreTheDetails) {
  const json cases = json::parse(read_file(kFixtures + "/cases.json"))["cases"];
  json rows;
  for (const auto& c : cases)
    if (c["name"] == "verl_compute_score_dict") rows = c["rows"];
  ASSERT_TRUE(rows.is_array());
  const VerifierSlot slot = make_slot(entry({{"path", scalar(kFixtures + "/rewards_verl.py")},
                                             {"function", scalar("compute_score_dict")},
                                             {"signature", scalar("verl")}}));
  grpo::sdk::VerifierInput in;
  const std::string gt = rows[0]["ground_truth"].dump(), meta = rows[0]["columns"].dump();
  const std::string completion = rows[0]["completion"], label = rows[0]["label"], prompt = rows[0]["prompt"];
  in.prompt = prompt;
  in.completion = completion;
  in.ground_truth = gt;
  in.dataset = label;
  in.metadata = meta;
  const json d = json::parse(slot.verifier->verify(in).details);
  EXPECT_TRUE(d.contains("acc")) << d.dump();
  EXPECT_TRUE(d.contains("pred")) << d.dump();
  EXPECT_FALSE(d.contains("score")) << d.dump();
}

// ------------------------------------------------------------------------------ routing

TEST(PythonReward, SeveralEntriesAreSelectedByRowLabel) {
  // Two functions of the fault fixture's module would do; two files of different signatures
  // show that each entry keeps its own interpreter pool and convention.
  ConfigValue by_len = entry({{"path", scalar(kFixtures + "/faults.py")}, {"function", scalar("faulty")},
                              {"label", scalar("lengths")}});
  ConfigValue verl = entry({{"path", scalar(kFixtures + "/rewards_verl.py")}, {"function", scalar("compute_score")},
                            {"signature", scalar("verl")}, {"label", list({"gsm8k", "math"})}});
  const std::vector<VerifierSlot> slots = {make_slot(by_len, "verifiers[0]"), make_slot(verl, "verifiers[1]")};
  EXPECT_EQ(slots[1].labels, (std::vector<std::string>{"gsm8k", "math"}));

  auto row = [](const std::string& completion, const std::string& label) {
    return make_row(completion, "42", label, json{{"extra_info", json{{"index", 3}}}});
  };
  const std::vector<json> rows = {row("abcd", "lengths"), row("the answer is 42", "gsm8k"), row("41", "math")};
  const auto verdicts = score_rows(rows, slots);
  ASSERT_EQ(verdicts[0].size(), 1u);
  EXPECT_EQ(verdicts[0][0].score, 0.4);  // faulty: len / 10
  ASSERT_EQ(verdicts[1].size(), 1u);
  ASSERT_EQ(verdicts[2].size(), 1u);
  for (std::size_t i = 1; i < 3; ++i) {  // the verl entry, as a direct call scores them
    json one = {{"path", "rewards_verl.py"}, {"function", "compute_score"}, {"signature", "verl"},
                {"rows", json::array({rows[i]})}};
    EXPECT_EQ(verdicts[i][0].score, direct_call(one, "route")[0].get<double>());
    EXPECT_FALSE(verdicts[i][0].failed) << verdicts[i][0].details;
  }

  // A label no entry answers to is refused before a run, naming the entries' labels.
  grpo::core::Example ex;
  ex.source = "train.jsonl";
  ex.line = 3;
  ex.targets.push_back(VerificationTarget{"aime", "\"1\""});
  try {
    grpo::core::check_verifier_labels({ex}, slots, RewardOptions{});
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("train.jsonl:3"));
    EXPECT_THAT(e.what(), HasSubstr("python_reward (label: gsm8k, math)"));
  }
  EXPECT_THAT(creation_error(entry({{"path", scalar(kFixtures + "/faults.py")}, {"function", scalar("faulty")},
                                    {"label", list({})}})),
              HasSubstr("non-empty list"));
}

// ------------------------------------------------------------------------------ faults

TEST(PythonReward, FaultsScoreZeroWithAReasonAndThePoolRecovers) {
  const std::string file = fixture_copy("faults.py", "faults");
  const std::string marker = fs::path(file).parent_path().string();
  {
    const VerifierSlot slot = make_slot(entry({{"path", scalar(file)}, {"function", scalar("faulty")},
                                               {"timeout_s", scalar("1.5")}, {"batch_size", scalar("16")}}));
    EXPECT_TRUE(marker_process_appears(marker)) << "the workers run";
    auto row = [](const std::string& completion) { return make_row(completion, "gt", "", json{{"difficulty", 1}}); };
    const std::vector<std::string> completions = {"ok one", "raise now", "ok two", "hang", "ok three", "exit",
                                                  "print me", "string", "nan", "inf", "-inf", "none", "big", "ok four"};
    std::vector<json> rows;
    for (const auto& c : completions) rows.push_back(row(c));
    const auto verdicts = score_rows(rows, {slot});
    std::map<std::string, grpo::core::VerifierVerdict> by;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      ASSERT_EQ(verdicts[i].size(), 1u);
      by[completions[i]] = verdicts[i][0];
    }
    for (const std::string ok : {"ok one", "ok two", "ok three", "ok four"}) {
      EXPECT_FALSE(by[ok].failed) << ok << ": " << by[ok].details;
      EXPECT_EQ(by[ok].score, static_cast<double>(std::string(ok).size()) / 10.0) << ok;
    }
    auto failed_with = [&](const std::string& c, const std::string& reason) {
      EXPECT_TRUE(by[c].failed) << c;
      EXPECT_EQ(by[c].score, 0.0) << c;
      EXPECT_THAT(by[c].details, HasSubstr(reason)) << c;
    };
    failed_with("raise now", "ValueError: bad row: raise now (faults.py:");
    failed_with("hang", "timed out after 1.5 s");
    failed_with("exit", "exited with status 3");
    failed_with("string", "returned str '0.5'");
    // Non-finite scores are named as returned (not all as nan), and fail as errors.
    failed_with("nan", "returned score nan, not a finite number");
    failed_with("inf", "returned score inf, not a finite number");
    failed_with("-inf", "returned score -inf, not a finite number");
    failed_with("none", "returned NoneType");
    // The worker's time-out is a time-out (reward/verifier_timeouts), every other fault an error.
    for (const auto& [completion, verdict] : by) EXPECT_EQ(verdict.timed_out, completion == "hang") << completion;
    // What the function prints goes to the run log, not into the protocol: the row scores.
    EXPECT_FALSE(by["print me"].failed) << by["print me"].details;
    EXPECT_EQ(by["print me"].score, 0.25);
    EXPECT_FALSE(by["big"].failed);  // unbounded: 1e6 reaches the reward
    EXPECT_EQ(by["big"].score, 1e6);

    // Recovered: a second round scores like the first.
    const auto again = score_rows({row("ok after"), row("raise again")}, {slot});
    EXPECT_EQ(again[0][0].score, 0.8);
    EXPECT_FALSE(again[0][0].failed);
    EXPECT_TRUE(again[1][0].failed);
  }
  // The verifier is gone: so is every interpreter it started (checked from the host).
  EXPECT_TRUE(marker_process_gone(marker));
  fs::remove_all(marker);
}

// An interpreter that dies between batches (here a timer thread of the function's) is
// restarted before the next batch, and none of that batch's rows is blamed for it.
TEST(PythonReward, WorkerThatDiesWhileIdleIsRestartedWithoutBlamingARow) {
  const std::string file = reward_file("idle", "r.py",
                                       "import os, threading\n"
                                       "def f(completion, ground_truth, **columns):\n"
                                       "    if completion == 'die later':\n"
                                       "        threading.Timer(0.2, lambda: os._exit(5)).start()\n"
                                       "    return 1.0\n");
  const VerifierSlot slot = make_slot(entry({{"path", scalar(file)}, {"function", scalar("f")},
                                             {"workers", scalar("1")}}));
  EXPECT_EQ(score_rows({make_row("die later")}, {slot})[0][0].score, 1.0);
  usleep(800000);  // the timer fires: the only worker exits while idle
  const auto v = score_rows({make_row("a"), make_row("b"), make_row("c")}, {slot});
  for (const auto& verdicts : v) {
    EXPECT_FALSE(verdicts[0].failed) << verdicts[0].details;
    EXPECT_EQ(verdicts[0].score, 1.0);
  }
  fs::remove_all(fs::path(file).parent_path());
}

TEST(PythonReward, TrlBatchThatRaisesIsSplitToFindTheRowsAtFault) {
  // One TRL call covers a batch: when it raises, the batch runs again row by row.
  const std::string file = reward_file("trl", "r.py",
                                       "def f(prompts, completions, **kw):\n"
                                       "    if any(c == 'bad' for c in completions):\n"
                                       "        raise KeyError('bad completion')\n"
                                       "    return [len(c) - 2.5 for c in completions]\n");
  const VerifierSlot slot = make_slot(entry({{"path", scalar(file)}, {"function", scalar("f")},
                                             {"signature", scalar("trl")}, {"batch_size", scalar("8")}}));
  const auto v = score_rows({make_row("a"), make_row("bad"), make_row("abcd"), make_row("xy")}, {slot});
  EXPECT_EQ(v[0][0].score, -1.5);
  EXPECT_TRUE(v[1][0].failed);
  EXPECT_THAT(v[1][0].details, HasSubstr("KeyError"));
  EXPECT_EQ(v[2][0].score, 1.5);
  EXPECT_EQ(v[3][0].score, -0.5);
  EXPECT_FALSE(v[0][0].failed || v[2][0].failed || v[3][0].failed);
  fs::remove_all(fs::path(file).parent_path());
}

// A worker's time-out counts under reward/verifier_timeouts, as the pool's own time-outs do;
// what the function raised counts under reward/verifier_errors.
TEST(PythonReward, WorkerTimeOutsAreCountedAsTimeOutsNotErrors) {
  const VerifierSlot slot = make_slot(entry({{"path", scalar(kFixtures + "/faults.py")}, {"function", scalar("faulty")},
                                             {"timeout_s", scalar("1")}, {"workers", scalar("1")}}));
  std::vector<Group> groups;
  std::vector<std::string> prompts;
  for (const std::string c : {"hang", "raise now", "abc"}) {
    groups.push_back(group_of(make_row(c)));
    prompts.push_back("p");
  }
  RewardOptions options;
  options.verification_reward = 1.0;
  VerifierPool pool(2, 60.0);
  const grpo::core::ScoringStats stats = pool.score(groups, prompts, {slot}, options);
  EXPECT_EQ(stats.timeouts, 1u);
  EXPECT_EQ(stats.failures, 1u);
  std::map<std::string, double> metrics;
  for (const auto& [name, value] : grpo::core::reward_metrics(groups)) metrics[name] = value;
  EXPECT_EQ(metrics["reward/verifier_timeouts"], 1.0);
  EXPECT_EQ(metrics["reward/verifier_errors"], 1.0);
  const grpo::core::VerifierVerdict& hang = groups[0].samples[0].verdicts.at(0);
  EXPECT_TRUE(hang.failed && hang.timed_out);
  EXPECT_THAT(hang.details, HasSubstr("timed out after 1 s (timeout_s, per row)"));
  EXPECT_EQ(groups[2].samples[0].verdicts.at(0).score, 0.3);
}

// Where an error of a TRL call happened is the user's file:line, never a line of the driver:
// the line that raised, or, for what the driver found wrong with the call (a list of the wrong
// length, arguments the function does not take), the function's definition.
TEST(PythonReward, TrlErrorsNameTheUsersFileAndLine) {
  const std::string file = reward_file("trlwhere", "r.py",
                                       "def f(prompts, completions, **kw):\n"
                                       "    if completions[0] == 'raise':\n"
                                       "        raise ValueError('bad batch')\n"
                                       "    return [1.0] * (len(completions) + 1)\n"
                                       "\n"
                                       "def g(prompts, completions):\n"
                                       "    return [1.0 for c in completions]\n");
  const VerifierSlot f = make_slot(entry({{"path", scalar(file)}, {"function", scalar("f")},
                                          {"signature", scalar("trl")}, {"workers", scalar("1")}}));
  const auto raised = score_rows({make_row("raise")}, {f})[0][0];
  ASSERT_TRUE(raised.failed);
  EXPECT_THAT(raised.details, HasSubstr("ValueError: bad batch (r.py:3)"));
  const auto wrong_length = score_rows({make_row("abc")}, {f})[0][0];
  ASSERT_TRUE(wrong_length.failed);
  EXPECT_THAT(wrong_length.details, HasSubstr("returns a list of 1 scores"));
  EXPECT_THAT(wrong_length.details, HasSubstr("(r.py:1)"));
  EXPECT_THAT(wrong_length.details, ::testing::Not(HasSubstr("<string>")));
  // Keywords the function does not take (ground_truth, a column): a TypeError at the call,
  // placed at g's definition.
  const VerifierSlot g = make_slot(entry({{"path", scalar(file)}, {"function", scalar("g")},
                                          {"signature", scalar("trl")}, {"workers", scalar("1")}}));
  const auto v = score_rows({make_row("a", 1, "", json{{"difficulty", 2}})}, {g})[0][0];
  ASSERT_TRUE(v.failed);
  EXPECT_THAT(v.details, HasSubstr("unexpected keyword argument"));
  EXPECT_THAT(v.details, HasSubstr("(r.py:6)"));
  EXPECT_THAT(v.details, ::testing::Not(HasSubstr("<string>")));
  fs::remove_all(fs::path(file).parent_path());
}

// What a function writes is read under bounds (the sandbox's LineReader): 200 MB into the
// protocol channel fail their row with the reason and the worker is replaced, after at most
// kMaxAnswerBytes were held; output without end on fd 1 (the run log) leaves the host's reader
// to its deadline: the row times out; a 200 MB log line is cut and its row scores.
TEST(PythonReward, FloodsAreCutWhileReadAndThePoolRecovers) {
  const std::string file = reward_file("flood", "r.py",
                                       "import inspect, os\n"
                                       "MB = b'y' * (1 << 20)\n"
                                       "def f(completion, ground_truth, **columns):\n"
                                       "    if completion == 'log':\n"
                                       "        for _ in range(200):\n"
                                       "            os.write(1, MB)\n"
                                       "        return 1.0\n"
                                       "    if completion == 'log forever':\n"
                                       "        while True:\n"
                                       "            os.write(1, MB)\n"
                                       "    if completion == 'protocol':\n"
                                       "        fd = next(f.frame.f_locals['out_fd'] for f in inspect.stack()\n"
                                       "                  if 'out_fd' in f.frame.f_locals)\n"
                                       "        for _ in range(200):\n"
                                       "            os.write(fd, MB)\n"
                                       "    return 0.5\n");
  const VerifierSlot slot = make_slot(entry({{"path", scalar(file)}, {"function", scalar("f")},
                                             {"timeout_s", scalar("3")}, {"workers", scalar("1")}}));
  const auto protocol = score_rows({make_row("protocol")}, {slot})[0][0];
  EXPECT_TRUE(protocol.failed);
  EXPECT_FALSE(protocol.timed_out);
  EXPECT_THAT(protocol.details, HasSubstr("the Python worker wrote more than 1048576 bytes without a line break into "
                                          "its protocol channel"));
  const auto forever = score_rows({make_row("log forever")}, {slot})[0][0];
  EXPECT_TRUE(forever.timed_out) << forever.details;
  EXPECT_THAT(forever.details, HasSubstr("timed out after 3 s"));
  const auto after = score_rows({make_row("log"), make_row("ok")}, {slot});
  EXPECT_FALSE(after[0][0].failed) << after[0][0].details;
  EXPECT_EQ(after[0][0].score, 1.0);
  EXPECT_FALSE(after[1][0].failed) << after[1][0].details;
  EXPECT_EQ(after[1][0].score, 0.5);
  fs::remove_all(fs::path(file).parent_path());
}

// A verl dict's details too large for one answer are replaced by a note, and the row scores.
TEST(PythonReward, DetailsTooLargeForOneAnswerAreDroppedWithANote) {
  const std::string file = reward_file("details", "r.py",
                                       "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                                       "    return {'score': 0.75, 'blob': 'x' * (3 << 20)}\n");
  const VerifierSlot slot = make_slot(entry({{"path", scalar(file)}, {"signature", scalar("verl")}}));
  const auto v = score_rows({make_row("c")}, {slot})[0][0];
  EXPECT_FALSE(v.failed) << v.details.substr(0, 300);
  EXPECT_EQ(v.score, 0.75);
  EXPECT_THAT(v.details, HasSubstr("details_dropped"));
  EXPECT_LT(v.details.size(), 1000u);
  fs::remove_all(fs::path(file).parent_path());
}

TEST(PythonReward, ImportErrorsAndMissingFunctionsFailAtStartUp) {
  const std::string bad = fixture_copy("bad_import.py", "import");
  const std::string marker = fs::path(bad).parent_path().string();
  const std::string e1 = creation_error(entry({{"path", scalar(bad)}, {"function", scalar("reward")}}));
  EXPECT_THAT(e1, HasSubstr("verifiers[0].path"));
  EXPECT_THAT(e1, HasSubstr("ModuleNotFoundError"));
  EXPECT_THAT(e1, HasSubstr("a_module_that_does_not_exist_xyz"));
  EXPECT_THAT(e1, HasSubstr("Traceback"));
  EXPECT_TRUE(marker_process_gone(marker));
  fs::remove_all(marker);

  const std::string e2 = creation_error(entry({{"path", scalar(kFixtures + "/no_function.py")}, {"function", scalar("reward")}}));
  EXPECT_THAT(e2, HasSubstr("has no function 'reward'"));
  EXPECT_THAT(e2, HasSubstr("other_reward"));

  const std::string e3 = creation_error(entry({{"path", scalar(kFixtures + "/rewards_verl.py")},
                                               {"function", scalar("compute_score")}, {"signature", scalar("plain")}}));
  EXPECT_THAT(e3, HasSubstr("cannot be called as signature 'plain'"));

  EXPECT_THAT(creation_error(entry({{"path", scalar(kFixtures + "/nope.py")}, {"function", scalar("f")}})),
              HasSubstr("no such file"));
  EXPECT_THAT(creation_error(entry({{"function", scalar("f")}})), HasSubstr("give exactly one of `path`"));
  EXPECT_THAT(creation_error(entry({{"path", scalar(kFixtures + "/faults.py")}})), HasSubstr("name the reward function"));
  EXPECT_THAT(creation_error(entry({{"module", scalar("json")}, {"function", scalar("dumps")}, {"signature", scalar("x")}})),
              HasSubstr("expected one of"));
  EXPECT_THAT(creation_error(entry({{"path", scalar(kFixtures + "/faults.py")}, {"function", scalar("faulty")},
                                    {"python", scalar("/nonexistent/python3")}})),
              HasSubstr("no executable interpreter"));
}

// A reward file named like a standard module (math.py) does not stand in for it while the
// modules it imports (fractions, statistics) import the real one.
TEST(PythonReward, RewardFileNamedLikeAStandardModule) {
  const std::string file = reward_file("stdname", "math.py",
                                       "import fractions\nimport statistics\n"
                                       "def reward(completion, ground_truth, **columns):\n"
                                       "    return float(fractions.Fraction(len(completion), 4)) + statistics.mean([1, 2])\n");
  const VerifierSlot slot = make_slot(entry({{"path", scalar(file)}, {"function", scalar("reward")}}));
  const auto v = score_rows({make_row("ab")}, {slot});
  EXPECT_FALSE(v[0][0].failed) << v[0][0].details;
  EXPECT_EQ(v[0][0].score, 2.0);  // 2/4 + mean(1, 2)
  fs::remove_all(fs::path(file).parent_path());
}

TEST(PythonReward, ModuleByNameWithPythonPath) {
  const json cases = json::parse(read_file(kFixtures + "/cases.json"))["cases"];
  json the_case;
  for (const auto& c : cases)
    if (c["name"] == "plain_word_overlap") the_case = c;
  const std::vector<json> rows(the_case["rows"].begin(), the_case["rows"].end());
  const json want = direct_call(the_case, "module");
  ConfigValue node = entry({{"module", scalar("rewards_plain")}, {"function", scalar("word_overlap")},
                            {"python_path", list({kFixtures})}});
  std::set<std::string> labels;
  for (const auto& r : rows) labels.insert(r["label"].get<std::string>());
  labels.erase("");
  node.set("label", list(std::vector<std::string>(labels.begin(), labels.end())), {});
  const auto v = score_rows(rows, {make_slot(node)});
  for (std::size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(v[i].size(), 1u);
    ASSERT_TRUE(want[i].is_number()) << want[i].dump();
    EXPECT_EQ(v[i][0].score, want[i].get<double>()) << i;
  }
}

// ------------------------------------------------------------------------------ sandbox

TEST(PythonReward, SandboxForbidsNetworkAndWritesOutsideTmpUnlessOff) {
  // A listener on the host's loopback: reachable unsandboxed, not from the sandbox's network.
  const int server = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(server, 16), 0);
  socklen_t len = sizeof addr;
  getsockname(server, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  const std::string out_dir = fresh_dir("write");
  fs::permissions(out_dir, fs::perms::all);  // even the sandbox's user could write here, were it visible
  const std::string target = out_dir + "/out.txt";

  auto probe = [&](bool sandboxed, const std::string& function, const json& gt) {
    const VerifierSlot slot = make_slot(entry({{"path", scalar(kFixtures + "/sandbox_probe.py")},
                                               {"function", scalar(function)},
                                               {"sandbox", scalar(sandboxed ? "true" : "false")},
                                               {"read_only_paths", list({out_dir})}}));
    const auto v = score_rows({make_row("c", gt)}, {slot});
    return v[0][0];
  };
  const json net = {{"host", "127.0.0.1"}, {"port", port}};
  const auto net_in = probe(true, "net", net);
  EXPECT_TRUE(net_in.failed);
  EXPECT_THAT(net_in.details, ::testing::AnyOf(HasSubstr("ConnectionRefusedError"), HasSubstr("OSError")));
  const auto net_out = probe(false, "net", net);
  EXPECT_FALSE(net_out.failed) << net_out.details;
  EXPECT_EQ(net_out.score, 1.0);

  // The folder is visible in the sandbox (read_only_paths), and read-only there.
  const auto write_in = probe(true, "write", json{{"path", target}});
  EXPECT_TRUE(write_in.failed);
  EXPECT_THAT(write_in.details, HasSubstr("Read-only file system"));
  EXPECT_FALSE(fs::exists(target));
  const auto write_tmp = probe(true, "write_tmp", json::object());
  EXPECT_FALSE(write_tmp.failed) << write_tmp.details;
  EXPECT_EQ(write_tmp.score, 1.0);
  const auto write_out = probe(false, "write", json{{"path", target}});
  EXPECT_FALSE(write_out.failed) << write_out.details;
  EXPECT_EQ(read_file(target), "written");
  close(server);
  fs::remove_all(out_dir);
}

TEST(PythonReward, UnitScoreRangeCountsOutOfRangeScoresAsFailures) {
  const VerifierSlot slot = make_slot(entry({{"path", scalar(kFixtures + "/faults.py")}, {"function", scalar("faulty")},
                                             {"score_range", scalar("unit")}}));
  EXPECT_EQ(slot.score_range, grpo::sdk::ScoreRange::kUnit);
  const auto v = score_rows({make_row("big"), make_row("abc")}, {slot});
  EXPECT_TRUE(v[0][0].failed);
  EXPECT_THAT(v[0][0].details, HasSubstr("outside [0, 1]"));
  EXPECT_EQ(v[1][0].score, 0.3);
}

}  // namespace
