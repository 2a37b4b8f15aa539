// Training and evaluation data: JSONL rows mapped to Examples with the column conventions of
// open-instruct (`messages`, `ground_truth`, `dataset`), TRL (`prompt`, other columns to the
// verifiers) and verl (`prompt`, `data_source`, `reward_model.ground_truth`); the mixer of
// several files (open-instruct's dataset_mixer_list weights); the seeded, checkpointable
// prompt order; and prompt rendering. Torch-free. See docs/training.md#data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/data/example.h"
#include "grpo/sdk/config_value.h"

namespace grpo::core {

// Bad data. A row's error reads "FILE:LINE: what was expected"; a file's error starts
// with "FILE: " and names the config key (e.g. "data.train[1]") when there is one.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One entry of data.train / data.eval.
struct DataSource {
  std::string path;        // as written: a relative path is relative to the current directory
  double weight = 1.0;     // rows taken = round(weight x the file's rows)
  std::int64_t count = 0;  // > 0: exactly this many rows (weight is then unused)
  std::string key_path;    // "data.train[0]", for messages
};

enum class DataFormat { kAuto, kOpenInstruct, kTrl, kVerl };

struct DataOptions {
  std::vector<DataSource> train, eval;
  DataFormat format = DataFormat::kAuto;
  // "" = the format's own column. A dotted name ("reward_model.ground_truth") reaches into
  // nested objects; a top-level column spelled exactly so wins over the nested reading.
  std::string prompt_column, ground_truth_column, dataset_column;
  // The supervised target of grpo-sft: "" = `completion` (trl) or the chat's trailing
  // assistant message (open_instruct).
  std::string completion_column;
  bool skip_bad_rows = false;
  bool shuffle = true;
  // Set by the job, not the config: grpo-run needs ground truths, grpo-sft completions.
  bool require_ground_truth = true;
  bool require_completion = false;
};

// The data.* keys of a validated, normalized configuration. Errors are sdk::ConfigError
// naming the key's file and line.
DataOptions data_options(const sdk::ConfigValue& root);

// "auto", "open_instruct", "trl", "verl".
const char* data_format_name(DataFormat format);

struct DataLoadReport {
  std::size_t rows = 0;              // rows returned
  std::size_t bad_rows_skipped = 0;  // malformed rows skipped (data.skip_bad_rows)
  std::vector<std::size_t> rows_per_source;
};

// Maps one JSONL line (a JSON object) to an Example; `source` and `line` (1-based) are
// recorded in it and prefix every error: DataError "SOURCE:LINE: ...". Ground truths keep
// their JSON text exactly as written in the line ("0.50" stays "0.50"); metadata is a JSON
// object of the columns not used for the prompt, the ground truth or the verifier label.
Example parse_example(std::string_view json_line, const DataOptions& options, const std::string& source,
                      std::size_t line);

// Every row of one JSONL file, in file order. Blank lines are skipped; a malformed line is a
// DataError, or with options.skip_bad_rows a counted warning. A file that cannot be read or
// has no usable row is a DataError naming it. `report` (may be null) is overwritten.
std::vector<Example> load_jsonl(const std::string& path, const DataOptions& options,
                                DataLoadReport* report = nullptr);

// The rows of `sources` concatenated in list order, each file resized as open-instruct's
// dataset_mixer_list does: N = count, or round(weight x rows); the file whole floor(N / rows)
// times, then a seeded subset of N mod rows distinct rows (kept in file order). The subset
// depends only on `seed`, the source's key_path and the file's row count. An empty `sources`
// gives no rows; a file that would contribute 0 rows is a DataError. `report` may be null.
std::vector<Example> load_mixture(const std::vector<DataSource>& sources, const DataOptions& options,
                                  std::uint64_t seed, DataLoadReport* report = nullptr);

// The order in which training rows are drawn: epoch after epoch, each a permutation of
// 0..num_rows-1 that depends only on (seed, epoch) (the identity with shuffle = false). The
// permutation is a Fisher-Yates shuffle driven by std::mt19937_64 with a rejection-sampling
// draw (both fully specified), so the order is the same with every compiler and library.
class PromptSampler {
 public:
  // Throws std::invalid_argument for num_rows == 0.
  PromptSampler(std::size_t num_rows, std::uint64_t seed, bool shuffle);

  // The next `n` row indices, crossing into the next epoch(s) as needed.
  std::vector<std::size_t> next(std::size_t n);

  // Where the next draw starts. Always offset < num_rows: a finished epoch reads as the
  // start of the next one.
  struct Position {
    std::uint64_t epoch = 0;
    std::uint64_t offset = 0;
  };
  Position position() const;
  // Afterwards next() returns exactly what it returned at that position. offset == num_rows
  // is the start of the next epoch; a larger offset (a checkpoint of other data) is a
  // DataError.
  void set_position(const Position& position);

  std::size_t num_rows() const { return num_rows_; }

  // The row order of one epoch.
  std::vector<std::size_t> epoch_order(std::uint64_t epoch) const;

 private:
  void load_epoch(std::uint64_t epoch);

  std::size_t num_rows_;
  std::uint64_t seed_;
  bool shuffle_;
  Position position_;
  std::vector<std::size_t> order_;  // epoch_order(order_epoch_)
  std::uint64_t order_epoch_ = 0;
};

// Uniform in [0, bound) from a std::mt19937_64 (specified bit for bit by the standard) by
// rejection sampling: the same draws with every compiler and library, unlike the standard
// distributions. bound > 0.
std::uint64_t uniform_below(std::mt19937_64& gen, std::uint64_t bound);

// The prompt text of a row: its chat rendered with the template and the generation prompt, or
// its plain text as is.
std::string render_prompt(const Example& example, const ChatTemplate& chat_template, const ChatRenderOptions& options = {});

}  // namespace grpo::core
