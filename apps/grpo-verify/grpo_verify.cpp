#include "apps/grpo-verify/grpo_verify.h"

#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/cli/app_common.h"
#include "core/config/config_loader.h"
#include "core/plugin/plugin_registry.h"
#include "core/runtime/components.h"
#include "core/runtime/logging.h"
#include "core/train/rewards.h"
#include "core/train/verifier_pool.h"
#include "core/util/fs.h"
#include "core/util/strings.h"
#include "grpo/sdk/config_view.h"

namespace grpo::cli {

using namespace grpo::core;

namespace {

namespace po = boost::program_options;
using json = nlohmann::json;

constexpr const char* kUsage = R"(Usage: grpo-verify --input FILE.jsonl [--output FILE.jsonl] [--config FILE]... [options]

Scores completions offline with the verifier plugins, as the trainer's reward path does.
Each input line is a JSON object:
  {"completion": "...", "ground_truth": <any JSON>, "verifier": "exact_match",
   "prompt": "...", "finished": true, "id": <any JSON>}
"dataset" may stand for "verifier" (as in training data). Verifier options come from the
config's `verifiers:` list (matched by name); a verifier not listed there runs with its
defaults. Lines are scored on the trainer's verifier pool: a call that throws scores 0 with
"error": true and the message in details, one still running after --timeout seconds scores 0
with "timed_out": true. Output: one JSON object per input line, {"id", "line", "verifier",
"score", "details"} ({"line", "error"} for a line that is not valid input), then a summary per
verifier on stderr.

Options)";

const std::string& exit_codes() {
  static const std::string text =
      exit_codes_help({{kExitOk, "every line scored"},
                       {kExitInternal},
                       {kExitUsage},
                       {kExitConfig, "invalid configuration (the message names file, line and key)"},
                       {kExitPlugin, "plugin error (unknown verifier, load failure)"},
                       {kExitBadInput, "some input lines were invalid (each reported in the output with its line number)"}});
  return text;
}

struct Item {
  std::size_t line = 0;
  json id;
  std::string verifier;
  std::string prompt, completion, ground_truth, metadata = "{}";
  bool finished = true;
  std::string error;  // non-empty: the line is invalid input
};

Item parse_line(const std::string& text, std::size_t line) {
  Item item;
  item.line = line;
  auto bad = [&](const std::string& what) {
    item.error = what;
    return item;
  };
  json j;
  if (std::string problem = parse_json_object(text, j); !problem.empty()) return bad(problem);
  if (j.contains("id")) item.id = j["id"];
  const json* name = j.contains("verifier") ? &j["verifier"] : j.contains("dataset") ? &j["dataset"] : nullptr;
  if (!name || !name->is_string() || name->get<std::string>().empty())
    return bad("expected \"verifier\" (or \"dataset\"): a verifier name string");
  item.verifier = name->get<std::string>();
  if (!j.contains("completion") || !j["completion"].is_string()) return bad("expected \"completion\": a string");
  item.completion = j["completion"].get<std::string>();
  if (j.contains("prompt")) {
    if (!j["prompt"].is_string()) return bad("\"prompt\" must be a string");
    item.prompt = j["prompt"].get<std::string>();
  }
  if (j.contains("finished")) {
    if (!j["finished"].is_boolean()) return bad("\"finished\" must be true or false");
    item.finished = j["finished"].get<bool>();
  }
  item.ground_truth = j.contains("ground_truth") ? j["ground_truth"].dump() : "null";
  json metadata = json::object();
  for (auto& [key, value] : j.items())
    if (key != "completion" && key != "ground_truth" && key != "verifier" && key != "dataset" && key != "prompt" &&
        key != "finished" && key != "id")
      metadata[key] = value;
  item.metadata = metadata.dump();
  return item;
}

struct Options {
  std::string input, output;
  std::vector<std::string> configs, sets, plugin_paths;
  unsigned threads = 0;   // 0: reward.num_threads, then the number of cores
  double timeout_s = 0.0;  // 0: reward.timeout_s
};

// One instance per verifier name: the config's entry when it names it (or, for an entry with a
// `label`, when one of its labels is the name), else the defaults. Each is keyed by the name the
// lines use, so that a line's label selects exactly its entry.
std::map<std::string, VerifierSlot> verifiers_by_name(PluginRegistry& registry, const sdk::ConfigValue& config,
                                                      const std::vector<Item>& items) {
  std::map<std::string, VerifierSlot> verifiers;
  RuntimeComponents configured = create_components(registry, config);
  for (const auto& slot : configured.verifiers) {
    for (const std::string& key : slot.labels.empty() ? std::vector<std::string>{slot.name} : slot.labels) {
      VerifierSlot keyed = slot;
      keyed.name = key;
      keyed.labels.clear();
      verifiers.emplace(key, std::move(keyed));
    }
  }
  for (const auto& item : items)
    if (item.error.empty() && !verifiers.count(item.verifier))
      verifiers[item.verifier] =
          create_verifier_slot(registry, item.verifier, nullptr, "line " + std::to_string(item.line) + " verifier");
  return verifiers;
}

// Scoring goes through the trainer's VerifierPool, so a line is judged exactly as a rollout
// would be: the same per-call timeout, a throwing or hung verifier scored 0 with the reason, a
// stuck worker replaced. Each valid line is a group of one sample whose one target is labelled
// with the line's verifier name; the pool's slots are the distinct names. group_of[i] is line
// i's group (SIZE_MAX for an invalid line).
std::vector<Group> score_lines(const Options& opt, const sdk::ConfigValue& config, const std::vector<Item>& items,
                               const std::map<std::string, VerifierSlot>& verifiers, std::vector<std::size_t>& group_of) {
  RewardOptions reward = reward_options(config);
  if (opt.threads) reward.num_threads = opt.threads;
  if (opt.timeout_s > 0) reward.timeout_s = opt.timeout_s;
  reward.format_verifier.clear();  // every verifier is judged on its own here
  std::vector<VerifierSlot> slots;
  for (const auto& [name, slot] : verifiers) {
    slots.push_back(slot);
    slots.back().weight = 1.0;
  }
  std::vector<Group> groups;
  std::vector<std::string> prompts;
  group_of.assign(items.size(), SIZE_MAX);
  for (std::size_t i = 0; i < items.size(); ++i) {
    const Item& item = items[i];
    if (!item.error.empty()) continue;
    Group g;
    g.example.source = opt.input;
    g.example.line = item.line;
    g.example.text = item.prompt;
    g.example.metadata = item.metadata;
    g.example.targets.push_back(VerificationTarget{item.verifier, item.ground_truth});
    Sample sample;
    sample.text = item.completion;
    sample.finished = item.finished;
    g.samples.push_back(std::move(sample));
    group_of[i] = groups.size();
    groups.push_back(std::move(g));
    prompts.push_back(item.prompt);
  }
  VerifierPool pool(reward.num_threads, reward.timeout_s);
  if (!groups.empty()) pool.score(groups, prompts, slots, reward);
  return groups;
}

struct Summary {
  std::size_t count = 0, errors = 0, timeouts = 0;
  double total = 0.0;
};

// One output record per input line (its verdict, or its error), in input order; the per-verifier
// summary is filled on the way.
std::string output_records(const std::vector<Item>& items, const std::vector<Group>& groups,
                           const std::vector<std::size_t>& group_of, std::map<std::string, Summary>& summary) {
  std::ostringstream out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const Item& item = items[i];
    json record = {{"line", item.line}};
    if (!item.id.is_null()) record["id"] = item.id;
    if (!item.error.empty()) {
      record["error"] = item.error;
    } else {
      record["verifier"] = item.verifier;
      // The verdict of the slot named exactly as the line (a label "math" also selects a
      // configured "plugin/math", as in training).
      const auto& verdicts = groups[group_of[i]].samples[0].verdicts;
      const auto it = std::find_if(verdicts.begin(), verdicts.end(),
                                   [&](const VerifierVerdict& v) { return v.verifier == item.verifier; });
      if (it == verdicts.end()) throw std::logic_error("grpo-verify: no verdict for line " + std::to_string(item.line));
      const VerifierVerdict& v = *it;
      record["score"] = v.score;
      if (!v.details.empty()) {
        json details = json::parse(v.details, nullptr, /*allow_exceptions=*/false);
        record["details"] = details.is_discarded() ? json(v.details) : details;  // not JSON: keep the text
      }
      if (v.timed_out) record["timed_out"] = true;
      else if (v.failed) record["error"] = true;
      Summary& s = summary[item.verifier];
      ++s.count;
      s.total += v.score;
      if (v.timed_out) ++s.timeouts;
      else if (v.failed) ++s.errors;
    }
    out << record.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  }
  return out.str();
}

int run(const Options& opt) {
  init_console_logging("warn");
  ConfigSources sources;
  sources.files = opt.configs;
  sources.overrides = opt.sets;
  sdk::ConfigValue config = load_config(sources);
  PluginRegistry registry(app_plugin_search_path(config, opt.configs, opt.plugin_paths));
  load_configured_plugins(registry, config);

  // Read every line first: invalid lines are reported, not fatal.
  std::vector<Item> items;
  for (const JsonlLine& line : read_jsonl_lines(opt.input, "--input")) items.push_back(parse_line(line.text, line.line));
  const std::map<std::string, VerifierSlot> verifiers = verifiers_by_name(registry, config, items);
  std::vector<std::size_t> group_of;
  const std::vector<Group> groups = score_lines(opt, config, items, verifiers, group_of);

  std::map<std::string, Summary> summary;
  const std::string records = output_records(items, groups, group_of, summary);
  if (opt.output.empty() || opt.output == "-")
    std::cout << records;
  else
    atomic_write_file(opt.output, records);

  std::cerr << "verifier              samples  mean score  errors  timeouts\n";
  for (const auto& [name, s] : summary) {
    char row[256];
    std::snprintf(row, sizeof row, "%-20s %8zu  %10.4f  %6zu  %8zu\n", name.c_str(), s.count,
                  s.count ? s.total / static_cast<double>(s.count) : 0.0, s.errors, s.timeouts);
    std::cerr << row;
  }
  std::size_t bad_lines = 0;
  for (const auto& item : items)
    if (!item.error.empty()) {
      ++bad_lines;
      std::cerr << "grpo-verify: " << (opt.input == "-" ? std::string("<stdin>") : opt.input) << ":" << item.line << ": "
                << item.error << "\n";
    }
  if (bad_lines) {
    std::cerr << "grpo-verify: " << bad_lines << " invalid input line(s), reported in the output\n";
    return kExitBadInput;
  }
  return kExitOk;
}

}  // namespace

int grpo_verify_main(int argc, char** argv) {
  Options opt;
  po::options_description desc(kUsage);
  bool show_help = false;
  // clang-format off
  desc.add_options()
    ("help,h", po::bool_switch(&show_help), "show this help and the exit codes")
    ("input,i", po::value(&opt.input), "JSONL file of completions ('-' = stdin)")
    ("output,o", po::value(&opt.output), "JSONL file for the scores, written atomically (default: stdout)")
    ("config,c", po::value(&opt.configs)->composing(), "YAML config file (its `verifiers:` options); repeatable")
    ("set,s", po::value(&opt.sets)->composing(), "override a config key: --set a.b=VALUE; repeatable")
    ("plugin-path", po::value(&opt.plugin_paths)->composing(), "a folder searched for plugins first; repeatable")
    ("threads,j", po::value(&opt.threads), "verifier threads (default: reward.num_threads, else the number of cores)")
    ("timeout", po::value(&opt.timeout_s), "seconds one verifier call may take before it scores 0 (default: reward.timeout_s, 30)");
  // clang-format on
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
    if (show_help) {
      std::cout << desc << exit_codes();
      return kExitOk;
    }
    if (opt.input.empty()) throw po::error("--input is required");
  } catch (const po::error& e) {
    return report_usage_error("grpo-verify", e.what());
  }
  return run_app_guarded("grpo-verify", [&] { return run(opt); });
}

}  // namespace grpo::cli
