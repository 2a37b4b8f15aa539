// The dataset layer (core/data/dataset.h): column conventions of open-instruct / TRL / verl,
// errors that name file and line, the mixer's row counts, the prompt order and prompt
// rendering. Expected values are worked by hand; the seeded orders were computed with an
// independent Python implementation of mt19937_64 (checked against the standard's 10000th
// output), splitmix64, the rejection draw and Fisher-Yates as documented in dataset.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "core/config/config_loader.h"
#include "core/data/dataset.h"
#include "tests/support/test_dir.h"

namespace {

using grpo::core::DataError;
using grpo::core::DataFormat;
using grpo::core::DataLoadReport;
using grpo::core::DataOptions;
using grpo::core::DataSource;
using grpo::core::Example;
using grpo::core::PromptSampler;

std::string write_file(const std::string& dir, const std::string& name, const std::string& content) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// The DataError message of `f`, or a failure when it does not throw one.
std::string data_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a DataError";
  return "";
}

Example one_row(const std::string& line, const DataOptions& options = {}) {
  return grpo::core::parse_example(line, options, "rows.jsonl", 1);
}

// ---------------------------------------------------------------------------------------
// Row mapping
// ---------------------------------------------------------------------------------------

TEST(DataRows, OpenInstructRowDropsTrailingAssistant) {
  const Example ex =
      one_row(R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},)"
              R"( {"role": "assistant", "content": "A"}], "ground_truth": "42", "dataset": "gsm8k", "id": 7})");
  ASSERT_EQ(ex.messages.size(), 2u);
  EXPECT_EQ(ex.messages[0].role, "system");
  EXPECT_EQ(ex.messages[0].content, "S");
  EXPECT_EQ(ex.messages[1].role, "user");
  EXPECT_EQ(ex.messages[1].content, "Q");
  EXPECT_EQ(ex.text, "");
  ASSERT_EQ(ex.targets.size(), 1u);
  EXPECT_EQ(ex.targets[0].label, "gsm8k");
  EXPECT_EQ(ex.targets[0].ground_truth, "\"42\"");  // JSON text, as grpo-verify hands it over
  EXPECT_EQ(ex.metadata, R"({"id":7})");
  EXPECT_EQ(ex.where(), "rows.jsonl:1");
  EXPECT_EQ(ex.completion, "A");  // the dropped assistant turn is the SFT target

  // A lone assistant message is the whole prompt: kept.
  const Example lone = one_row(R"({"messages": [{"role": "assistant", "content": "A"}], "ground_truth": 1})");
  ASSERT_EQ(lone.messages.size(), 1u);
  EXPECT_EQ(lone.messages[0].role, "assistant");
  EXPECT_EQ(lone.targets[0].label, "");  // no `dataset` column: every verifier
}

TEST(DataRows, CompletionColumnForSupervisedRows) {
  DataOptions sft;
  sft.require_ground_truth = false;
  sft.require_completion = true;
  // TRL prompt + completion (string), no ground truth: the completion is not metadata.
  const Example trl = one_row(R"({"prompt": "2+2=", "completion": "4", "id": 1})", sft);
  EXPECT_EQ(trl.text, "2+2=");
  EXPECT_EQ(trl.completion, "4");
  EXPECT_TRUE(trl.targets.empty());
  EXPECT_EQ(trl.metadata, R"({"id":1})");
  // TRL conversational completion: the assistant message's content.
  const Example chat = one_row(
      R"({"prompt": [{"role": "user", "content": "Q"}], "completion": [{"role": "assistant", "content": "A"}]})", sft);
  EXPECT_EQ(chat.completion, "A");
  ASSERT_EQ(chat.messages.size(), 1u);
  // data.completion_column names another column.
  DataOptions named = sft;
  named.completion_column = "answer";
  EXPECT_EQ(one_row(R"({"prompt": "Q", "answer": "A", "completion": "no"})", named).completion, "A");
  // Missing or malformed: errors name the row and what was expected.
  EXPECT_NE(data_error([&] { one_row(R"({"prompt": "Q", "ground_truth": "1"})", sft); })
                .find("rows.jsonl:1: no completion to train on: expected a non-empty column 'completion'"),
            std::string::npos);
  EXPECT_NE(data_error([&] { one_row(R"({"prompt": "Q", "completion": 3})", sft); })
                .find("rows.jsonl:1: column 'completion': expected a string or a chat list ending with an assistant message"),
            std::string::npos);
  // grpo-run's rows still need a ground truth.
  EXPECT_NE(data_error([&] { one_row(R"({"prompt": "Q", "completion": "A"})"); }).find("no ground truth column 'ground_truth'"),
            std::string::npos);
}

TEST(DataRows, AlignedLabelListsGiveOneTargetPerPair) {
  const Example ex = one_row(
      R"({"messages": [{"role": "user", "content": "Q"}], "ground_truth": ["3", 0.50], "dataset": ["math", "exact_match"]})");
  ASSERT_EQ(ex.targets.size(), 2u);
  EXPECT_EQ(ex.targets[0].label, "math");
  EXPECT_EQ(ex.targets[0].ground_truth, "\"3\"");
  EXPECT_EQ(ex.targets[1].label, "exact_match");
  EXPECT_EQ(ex.targets[1].ground_truth, "0.50");  // the number as written, not re-formatted
  EXPECT_EQ(ex.metadata, "{}");

  // A string label with a list ground truth: one target holding the whole list.
  const Example whole = one_row(
      R"({"messages": [{"role": "user", "content": "Q"}], "ground_truth": ["a", "b"], "dataset": "exact_match"})");
  ASSERT_EQ(whole.targets.size(), 1u);
  EXPECT_EQ(whole.targets[0].label, "exact_match");
  EXPECT_EQ(whole.targets[0].ground_truth, R"(["a", "b"])");
}

TEST(DataRows, TrlStringPromptSendsOtherColumnsToMetadata) {
  DataOptions trl;
  trl.format = DataFormat::kTrl;
  const std::string line =
      R"({"difficulty": "easy", "prompt": "What is 2+2?", "ground_truth": 4, "dataset": "x", "tags": [1, 2.0]})";
  for (const DataOptions& options : {trl, DataOptions{}}) {  // explicit and auto-detected
    const Example ex = one_row(line, options);
    EXPECT_TRUE(ex.messages.empty());
    EXPECT_EQ(ex.text, "What is 2+2?");
    ASSERT_EQ(ex.targets.size(), 1u);
    EXPECT_EQ(ex.targets[0].label, "");  // TRL has no label column: every verifier
    EXPECT_EQ(ex.targets[0].ground_truth, "4");
    EXPECT_EQ(ex.metadata, R"({"difficulty":"easy","dataset":"x","tags":[1, 2.0]})");
  }
}

TEST(DataRows, TrlChatPromptWithColumnOverrides) {
  DataOptions o;
  o.format = DataFormat::kTrl;
  o.ground_truth_column = "answer";
  o.dataset_column = "task";
  const Example ex = one_row(
      R"({"prompt": [{"role": "user", "content": "Hi"}], "answer": "hello", "task": "exact_match", "ground_truth": 0})",
      o);
  ASSERT_EQ(ex.messages.size(), 1u);
  EXPECT_EQ(ex.messages[0].content, "Hi");
  ASSERT_EQ(ex.targets.size(), 1u);
  EXPECT_EQ(ex.targets[0].label, "exact_match");
  EXPECT_EQ(ex.targets[0].ground_truth, "\"hello\"");
  EXPECT_EQ(ex.metadata, R"({"ground_truth":0})");  // not the configured column: just data
}

TEST(DataRows, VerlRow) {
  const std::string line =
      R"({"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "Q"}], "ability": "math",)"
      R"( "reward_model": {"style": "rule", "ground_truth": "72"}, "extra_info": {"split": "train", "index": 0}})";
  DataOptions verl;
  verl.format = DataFormat::kVerl;
  for (const DataOptions& options : {verl, DataOptions{}}) {
    const Example ex = one_row(line, options);
    ASSERT_EQ(ex.messages.size(), 1u);
    EXPECT_EQ(ex.messages[0].role, "user");
    ASSERT_EQ(ex.targets.size(), 1u);
    EXPECT_EQ(ex.targets[0].label, "openai/gsm8k");
    EXPECT_EQ(ex.targets[0].ground_truth, "\"72\"");
    EXPECT_EQ(ex.metadata, R"({"ability":"math","extra_info":{"split": "train", "index": 0}})");
  }
  // A string prompt is plain text in verl rows too.
  const Example text = one_row(R"({"prompt": "Q", "reward_model": {"ground_truth": 1}})");
  EXPECT_EQ(text.text, "Q");
  EXPECT_EQ(text.targets[0].ground_truth, "1");
}

TEST(DataRows, DottedColumnReachesIntoObjects) {
  DataOptions o;
  o.ground_truth_column = "meta.answer.value";
  const Example ex = one_row(R"({"prompt": "p", "meta": {"answer": {"value": "x"}, "other": 1}, "keep": true})", o);
  EXPECT_EQ(ex.targets[0].ground_truth, "\"x\"");
  EXPECT_EQ(ex.metadata, R"({"keep":true})");  // the column the path starts in is used

  // A top-level column spelled with the dot wins over the nested reading.
  o.ground_truth_column = "a.b";
  const Example literal = one_row(R"({"prompt": "p", "a": {"b": 2}, "a.b": 1})", o);
  EXPECT_EQ(literal.targets[0].ground_truth, "1");
  EXPECT_EQ(literal.metadata, R"({"a":{"b": 2}})");

  // A path through a non-object is a missing column.
  o.ground_truth_column = "a.b.c";
  EXPECT_NE(data_error([&] { one_row(R"({"prompt": "p", "a": {"b": 2}})", o); }).find("no ground truth column 'a.b.c'"),
            std::string::npos);
}

TEST(DataRows, GroundTruthAndMetadataKeepTheWrittenText) {
  // Brackets and quotes inside strings, escapes in keys, odd spacing, duplicate keys (the
  // last one counts, as in every JSON parser that keeps one).
  const Example ex = one_row(R"({"prompt" : "a \"}\" [", "x": "\\", "gr\u006fund_truth":  {"k": "v}", "n": 1.500} ,)"
                             R"( "y": [1, {"z": "]"}], "y": [2], "caf\u00e9": "\u00bd"})");
  EXPECT_EQ(ex.text, "a \"}\" [");
  EXPECT_EQ(ex.targets.at(0).ground_truth, R"({"k": "v}", "n": 1.500})");
  EXPECT_EQ(ex.metadata, R"({"x":"\\","y":[2],"caf\u00e9":"\u00bd"})");

  const Example dup = one_row(R"({"prompt": "p", "ground_truth": 1, "ground_truth": "2"})");
  EXPECT_EQ(dup.targets.at(0).ground_truth, "\"2\"");
  EXPECT_EQ(dup.metadata, "{}");
}

TEST(DataRows, AutoDetectsEachRowAndNamesWhatItLookedFor) {
  const std::string dir = grpo::testing::fresh_test_dir("data");
  const std::string path = write_file(
      dir, "mixed.jsonl",
      R"({"messages": [{"role": "user", "content": "a"}], "ground_truth": 1})"
      "\n"
      R"({"prompt": [{"role": "user", "content": "b"}], "reward_model": {"ground_truth": 2}, "data_source": "v"})"
      "\n"
      R"({"prompt": "c", "ground_truth": 3})"
      "\n");
  const std::vector<Example> rows = grpo::core::load_jsonl(path, DataOptions{});
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].messages.at(0).content, "a");
  EXPECT_EQ(rows[1].messages.at(0).content, "b");
  EXPECT_EQ(rows[1].targets[0].label, "v");
  EXPECT_EQ(rows[1].targets[0].ground_truth, "2");
  EXPECT_EQ(rows[2].text, "c");
  EXPECT_EQ(rows[2].line, 3u);

  const std::string bad = write_file(dir, "unknown.jsonl",
                                     "\n"
                                     R"({"question": "q", "answer": "a"})"
                                     "\n");
  const std::string msg = data_error([&] { grpo::core::load_jsonl(bad, DataOptions{}); });
  EXPECT_EQ(msg.rfind(bad + ":2: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("cannot tell the row's format"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'messages'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'reward_model'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'prompt'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'question', 'answer'"), std::string::npos) << msg;
}

TEST(DataRows, MalformedLineNamesFileLineAndWhatWasExpected) {
  const std::string dir = grpo::testing::fresh_test_dir("data");
  const std::string good = R"({"messages": [{"role": "user", "content": "q"}], "ground_truth": "a"})";
  const std::string good_trl = R"({"prompt": "q", "ground_truth": "a"})";
  const std::string deep = R"({"prompt": "p", "ground_truth": )" + std::string(70, '[') + std::string(70, ']') + "}";
  struct Case {
    std::string line;
    std::vector<std::string> expected;  // substrings of the message
    DataFormat format = DataFormat::kAuto;
  };
  const std::vector<Case> cases = {
      {R"({"messages": [)", {"not valid JSON", "at column", "expected one JSON object per line"}},
      {R"([1, 2])", {"expected a JSON object", "got a list of 2"}},
      {R"({"prompt": 5, "ground_truth": 1})", {"column 'prompt': expected a string or a chat list", "got a number"}},
      {R"({"prompt": "", "ground_truth": 1})",
       {"column 'prompt': expected a string or a chat list", "got an empty string"}},
      {R"({"messages": "hi", "ground_truth": 1})", {"column 'messages': expected a chat list", "got a string"}},
      {R"({"messages": [], "ground_truth": 1})", {"column 'messages': expected a chat list", "got an empty list"}},
      {R"({"messages": [{"role": "user", "content": null}], "ground_truth": 1})",
       {"column 'messages' message 0: expected a chat message {\"role\": string, \"content\": string}",
        "\"content\": null"}},
      {R"({"messages": [{"role": "user", "content": "x"}, {"content": "y"}], "ground_truth": 1})",
       {"column 'messages' message 1: expected a chat message", "no \"role\""}},
      {R"({"messages": [{"role": "user", "content": "x"}], "answer": 1})",
       {"no ground truth column 'ground_truth'", "'messages', 'answer'", "data.ground_truth_column"}},
      {R"({"messages": [{"role": "user", "content": "x"}], "ground_truth": ["a"], "dataset": ["m", "n"]})",
       {"column 'dataset' is a list of 2 verifier labels", "'ground_truth' must be a list of 2 ground truths",
        "got a list of 1"}},
      {R"({"messages": [{"role": "user", "content": "x"}], "ground_truth": "a", "dataset": ["m"]})",
       {"must be a list of 1 ground truths", "got a string"}},
      {R"({"messages": [{"role": "user", "content": "x"}], "ground_truth": "a", "dataset": 5})",
       {"column 'dataset': expected a verifier label (a string)", "got a number"}},
      {R"({"messages": [{"role": "user", "content": "x"}], "ground_truth": "a", "dataset": ["m", 2]})",
       {"column 'dataset' item 1: expected a verifier label (a string)"}},
      {deep, {"JSON nested deeper than 64 levels"}},
      {R"({"prompt": "p", "ground_truth": 1e400})", {"number overflow", "write such a number as a string"}},
      {R"({"question": "q", "ground_truth": 1})",
       {"no prompt column 'prompt'", "data.prompt_column"},
       DataFormat::kTrl},
      {R"({"prompt": "q", "ground_truth": 1})",
       {"no prompt column 'messages'", "expected a chat list"},
       DataFormat::kOpenInstruct},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].line);
    // Line 2 is blank and line 4 is bad: line numbers count every line of the file.
    const std::string& ok = cases[i].format == DataFormat::kTrl ? good_trl : good;
    const std::string path = write_file(dir, "bad" + std::to_string(i) + ".jsonl",
                                        ok + "\n  \n" + ok + "\n" + cases[i].line + "\n" + ok + "\n");
    DataOptions o;
    o.format = cases[i].format;
    const std::string msg = data_error([&] { grpo::core::load_jsonl(path, o); });
    EXPECT_EQ(msg.rfind(path + ":4: ", 0), 0u) << msg;
    for (const std::string& want : cases[i].expected) EXPECT_NE(msg.find(want), std::string::npos) << msg;
  }
}

TEST(DataRows, SkipBadRowsCountsThem) {
  const std::string dir = grpo::testing::fresh_test_dir("data");
  const std::string path = write_file(dir, "rows.jsonl",
                                      "{\"prompt\": \"a\", \"ground_truth\": 1}\n"
                                      "not json\n"
                                      "\n"
                                      "{\"prompt\": \"b\", \"ground_truth\": 2}\r\n"
                                      "{\"prompt\": 3, \"ground_truth\": 3}\n"
                                      "{\"prompt\": \"c\", \"ground_truth\": 4}");  // no final newline
  DataOptions o;
  o.skip_bad_rows = true;
  DataLoadReport report;
  const std::vector<Example> rows = grpo::core::load_jsonl(path, o, &report);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].line, 1u);
  EXPECT_EQ(rows[1].line, 4u);
  EXPECT_EQ(rows[1].text, "b");
  EXPECT_EQ(rows[2].line, 6u);
  EXPECT_EQ(rows[2].targets[0].ground_truth, "4");
  EXPECT_EQ(report.rows, 3u);
  EXPECT_EQ(report.bad_rows_skipped, 2u);
  EXPECT_EQ(report.rows_per_source, std::vector<std::size_t>{3});

  // Without the option the first bad line stops the load.
  o.skip_bad_rows = false;
  EXPECT_EQ(data_error([&] { grpo::core::load_jsonl(path, o); }).rfind(path + ":2: not valid JSON", 0), 0u);
}

TEST(DataFiles, EmptyMissingAndAllBadFilesNameTheFileAndKey) {
  const std::string dir = grpo::testing::fresh_test_dir("data");
  const std::string good = write_file(dir, "good.jsonl", "{\"prompt\": \"a\", \"ground_truth\": 1}\n");
  const std::string empty = write_file(dir, "empty.jsonl", "");
  const std::string blank = write_file(dir, "blank.jsonl", "\n   \n\t\n");
  const std::string all_bad = write_file(dir, "bad.jsonl", "x\n[]\n");
  const std::string missing = dir + "/missing.jsonl";

  std::string msg = data_error([&] { grpo::core::load_jsonl(empty, DataOptions{}); });
  EXPECT_EQ(msg.rfind(empty + ": no usable rows", 0), 0u) << msg;
  msg = data_error([&] { grpo::core::load_jsonl(blank, DataOptions{}); });
  EXPECT_EQ(msg.rfind(blank + ": no usable rows", 0), 0u) << msg;

  DataOptions skip;
  skip.skip_bad_rows = true;
  msg = data_error([&] { grpo::core::load_jsonl(all_bad, skip); });
  EXPECT_NE(msg.find("no usable rows"), std::string::npos) << msg;
  EXPECT_NE(msg.find("all 2 rows are malformed"), std::string::npos) << msg;

  msg = data_error([&] { grpo::core::load_jsonl(missing, DataOptions{}); });
  EXPECT_EQ(msg.rfind(missing + ": cannot open the data file", 0), 0u) << msg;
  EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
  msg = data_error([&] { grpo::core::load_jsonl(dir, DataOptions{}); });
  EXPECT_NE(msg.find("it is a directory"), std::string::npos) << msg;

  // Through the mixer the message names the config key of the file.
  const std::vector<DataSource> sources = {{good, 1.0, 0, "data.train[0]"}, {missing, 1.0, 0, "data.train[1]"}};
  msg = data_error([&] { grpo::core::load_mixture(sources, DataOptions{}, 1, nullptr); });
  EXPECT_EQ(msg.rfind(missing + ": cannot open the data file (data.train[1])", 0), 0u) << msg;
  const std::vector<DataSource> empties = {{empty, 1.0, 0, "data.eval[0]"}};
  msg = data_error([&] { grpo::core::load_mixture(empties, DataOptions{}, 1, nullptr); });
  EXPECT_EQ(msg.rfind(empty + ": no usable rows (data.eval[0])", 0), 0u) << msg;
}

// ---------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------

TEST(DataOptionsFromConfig, ReadsEveryKey) {
  grpo::core::ConfigSources sources;
  sources.overrides = {"data.train=[{path: a.jsonl, weight: 0.5}, b.jsonl, {path: c.jsonl, count: 3}]",
                       "data.eval=[e.jsonl]",
                       "data.format=verl",
                       "data.prompt_column=question",
                       "data.ground_truth_column=reward_model.answer",
                       "data.dataset_column=task",
                       "data.completion_column=response",
                       "data.skip_bad_rows=true",
                       "data.shuffle=false"};
  const DataOptions o = grpo::core::data_options(grpo::core::load_config(sources));
  ASSERT_EQ(o.train.size(), 3u);
  EXPECT_EQ(o.train[0].path, "a.jsonl");
  EXPECT_DOUBLE_EQ(o.train[0].weight, 0.5);
  EXPECT_EQ(o.train[0].count, 0);
  EXPECT_EQ(o.train[0].key_path, "data.train[0]");
  EXPECT_EQ(o.train[1].path, "b.jsonl");
  EXPECT_DOUBLE_EQ(o.train[1].weight, 1.0);
  EXPECT_EQ(o.train[2].path, "c.jsonl");
  EXPECT_EQ(o.train[2].count, 3);
  EXPECT_EQ(o.train[2].key_path, "data.train[2]");
  ASSERT_EQ(o.eval.size(), 1u);
  EXPECT_EQ(o.eval[0].path, "e.jsonl");
  EXPECT_EQ(o.eval[0].key_path, "data.eval[0]");
  EXPECT_EQ(o.format, DataFormat::kVerl);
  EXPECT_EQ(o.prompt_column, "question");
  EXPECT_EQ(o.ground_truth_column, "reward_model.answer");
  EXPECT_EQ(o.dataset_column, "task");
  EXPECT_EQ(o.completion_column, "response");
  EXPECT_TRUE(o.skip_bad_rows);
  EXPECT_FALSE(o.shuffle);

  const DataOptions d = grpo::core::data_options(grpo::core::load_config({}));
  EXPECT_TRUE(d.train.empty());
  EXPECT_TRUE(d.eval.empty());
  EXPECT_EQ(d.format, DataFormat::kAuto);
  EXPECT_EQ(d.prompt_column, "");
  EXPECT_FALSE(d.skip_bad_rows);
  EXPECT_TRUE(d.shuffle);
}

// ---------------------------------------------------------------------------------------
// Mixer
// ---------------------------------------------------------------------------------------

// Ground truth of row i of the ten-row file is i: the value identifies the row.
std::vector<int> row_ids(const std::vector<Example>& rows, std::size_t begin, std::size_t end) {
  std::vector<int> out;
  for (std::size_t i = begin; i < end; ++i) out.push_back(std::stoi(rows[i].targets.at(0).ground_truth));
  return out;
}

bool distinct_ascending_below_10(const std::vector<int>& ids) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] > 9 || (i > 0 && ids[i] <= ids[i - 1])) return false;
  return true;
}

TEST(DataMixer, WeightsAndCountsGiveHandComputedRows) {
  const std::string dir = grpo::testing::fresh_test_dir("data");
  std::string content;
  for (int i = 0; i < 10; ++i)
    content += "{\"prompt\": \"p" + std::to_string(i) + "\", \"ground_truth\": " + std::to_string(i) + "}\n";
  const std::string ten = write_file(dir, "ten.jsonl", content);
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};

  const std::vector<DataSource> sources = {
      {ten, 0.5, 0, "data.train[0]"},   // round(0.5 x 10) = 5: a subset, no repeats
      {ten, 2.5, 0, "data.train[1]"},   // 25 = the file twice + 5 sampled rows
      {ten, 1.0, 13, "data.train[2]"},  // count 13 = the file once + 3 (weight unused)
      {ten, 1.0, 0, "data.train[3]"},   // the file as is
      {ten, 0.25, 0, "data.train[4]"},  // round(2.5) = 3: halves round away from zero
  };
  DataLoadReport report;
  const std::vector<Example> rows = grpo::core::load_mixture(sources, DataOptions{}, 3, &report);
  EXPECT_EQ(report.rows_per_source, (std::vector<std::size_t>{5, 25, 13, 10, 3}));
  EXPECT_EQ(report.rows, 56u);
  EXPECT_EQ(report.bad_rows_skipped, 0u);
  ASSERT_EQ(rows.size(), 56u);

  // Seed 3, key "data.train[0]": the partial Fisher-Yates picks rows {1, 2, 5, 7, 8}
  // (independent Python reference); picked rows keep file order.
  EXPECT_EQ(row_ids(rows, 0, 5), (std::vector<int>{1, 2, 5, 7, 8}));
  EXPECT_EQ(rows[0].text, "p1");
  EXPECT_EQ(rows[0].line, 2u);

  std::vector<int> twice = all;
  twice.insert(twice.end(), all.begin(), all.end());
  EXPECT_EQ(row_ids(rows, 5, 25), twice);
  EXPECT_TRUE(distinct_ascending_below_10(row_ids(rows, 25, 30)));
  EXPECT_EQ(row_ids(rows, 30, 40), all);
  EXPECT_TRUE(distinct_ascending_below_10(row_ids(rows, 40, 43)));
  EXPECT_EQ(row_ids(rows, 43, 53), all);
  EXPECT_TRUE(distinct_ascending_below_10(row_ids(rows, 53, 56)));

  // Same seed, same rows.
  const std::vector<Example> again = grpo::core::load_mixture(sources, DataOptions{}, 3, nullptr);
  EXPECT_EQ(row_ids(again, 0, again.size()), row_ids(rows, 0, rows.size()));

  // A weight that leaves no row is an error, not a silently missing file.
  const std::string msg = data_error([&] {
    grpo::core::load_mixture({{ten, 0.01, 0, "data.train[0]"}}, DataOptions{}, 3, nullptr);
  });
  EXPECT_NE(msg.find("(data.train[0])"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rounds to 0 rows"), std::string::npos) << msg;

  EXPECT_TRUE(grpo::core::load_mixture({}, DataOptions{}, 3, nullptr).empty());
}

// ---------------------------------------------------------------------------------------
// Prompt order
// ---------------------------------------------------------------------------------------

std::vector<std::size_t> sorted(std::vector<std::size_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<std::size_t> iota_n(std::size_t n) {
  std::vector<std::size_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(DataSampler, OrderMatchesTheSpecifiedShuffle) {
  // seed 7, n 10: Fisher-Yates over mt19937_64(derive(7, epoch)) computed by the Python
  // reference: fixed across compilers and standard libraries.
  PromptSampler s(10, 7, true);
  EXPECT_EQ(s.next(10), (std::vector<std::size_t>{0, 4, 1, 8, 2, 7, 5, 6, 9, 3}));
  EXPECT_EQ(s.next(10), (std::vector<std::size_t>{0, 2, 4, 8, 3, 1, 9, 7, 6, 5}));
  EXPECT_EQ(s.num_rows(), 10u);
}

TEST(DataSampler, SameSeedSameOrderEpochsArePermutationsThatDiffer) {
  PromptSampler a(10, 123, true), b(10, 123, true), other(10, 124, true);
  const std::vector<std::size_t> three_epochs = a.next(30);
  EXPECT_EQ(b.next(30), three_epochs);
  EXPECT_NE(other.next(30), three_epochs);
  std::vector<std::vector<std::size_t>> epochs;
  for (std::size_t e = 0; e < 3; ++e) {
    epochs.emplace_back(three_epochs.begin() + e * 10, three_epochs.begin() + (e + 1) * 10);
    EXPECT_EQ(sorted(epochs.back()), iota_n(10)) << "epoch " << e;
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  EXPECT_EQ(a.epoch_order(1), epochs[1]);
}

TEST(DataSampler, OneDrawCrossesEpochBoundaries) {
  PromptSampler whole(10, 5, true);
  const std::vector<std::size_t> e0 = whole.next(10), e1 = whole.next(10), e2 = whole.next(10);

  PromptSampler s(10, 5, true);
  EXPECT_EQ(s.next(7), std::vector<std::size_t>(e0.begin(), e0.begin() + 7));
  // 3 from the end of epoch 0, then 4 from the start of epoch 1.
  std::vector<std::size_t> crossing(e0.begin() + 7, e0.end());
  crossing.insert(crossing.end(), e1.begin(), e1.begin() + 4);
  EXPECT_EQ(s.next(7), crossing);
  EXPECT_EQ(s.position().epoch, 1u);
  EXPECT_EQ(s.position().offset, 4u);
  // More than a whole epoch in one call: rest of epoch 1, all of epoch 2.
  std::vector<std::size_t> long_draw(e1.begin() + 4, e1.end());
  long_draw.insert(long_draw.end(), e2.begin(), e2.end());
  EXPECT_EQ(s.next(16), long_draw);
  // A finished epoch reads as the start of the next.
  EXPECT_EQ(s.position().epoch, 3u);
  EXPECT_EQ(s.position().offset, 0u);
  EXPECT_TRUE(s.next(0).empty());
}

TEST(DataSampler, PositionRestoreReproducesTheFuture) {
  PromptSampler a(10, 99, true);
  a.next(13);
  const PromptSampler::Position saved = a.position();
  EXPECT_EQ(saved.epoch, 1u);
  EXPECT_EQ(saved.offset, 3u);
  const std::vector<std::size_t> future = a.next(25);

  PromptSampler b(10, 99, true);
  b.next(4);  // somewhere else first
  b.set_position(saved);
  EXPECT_EQ(b.next(25), future);

  // offset == num_rows is the start of the next epoch.
  PromptSampler c(10, 99, true), d(10, 99, true);
  c.set_position({1, 10});
  d.set_position({2, 0});
  EXPECT_EQ(c.position().epoch, 2u);
  EXPECT_EQ(c.position().offset, 0u);
  EXPECT_EQ(c.next(12), d.next(12));

  // A position past the data (a checkpoint of another data set) is an error.
  EXPECT_THROW(c.set_position({0, 11}), DataError);
}

TEST(DataSampler, NoShuffleRepeatsFileOrder) {
  PromptSampler s(4, 7, false);
  EXPECT_EQ(s.next(10), (std::vector<std::size_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1}));
  EXPECT_EQ(s.next(2), (std::vector<std::size_t>{2, 3}));
}

TEST(DataSampler, NoRowsIsInvalid) { EXPECT_THROW(PromptSampler(0, 1, true), std::invalid_argument); }

// ---------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------

TEST(DataRenderPrompt, ChatmlAndPlainText) {
  Example chat;
  chat.messages = {{"system", "Be brief."}, {"user", "What is 2+2?"}};
  const auto chatml = grpo::core::ChatTemplate::builtin("chatml");
  EXPECT_EQ(grpo::core::render_prompt(chat, chatml),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");

  Example text;
  text.text = "Question: 2+2?\nAnswer:";
  EXPECT_EQ(grpo::core::render_prompt(text, chatml), "Question: 2+2?\nAnswer:");
}

}  // namespace
