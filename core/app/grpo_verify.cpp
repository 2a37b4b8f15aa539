#include "core/app/grpo_verify.h"

#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/app/app_common.h"
#include "core/config/config_loader.h"
#include "core/plugin/plugin_registry.h"
#include "core/runtime/components.h"
#include "core/runtime/logging.h"
#include "core/util/fs.h"
#include "core/util/strings.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

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
defaults. Output: one JSON object per input line, {"id", "line", "verifier", "score",
"details"} ({"line", "error"} for a line that is not valid input), then a summary per
verifier on stderr.

Options)";

constexpr const char* kExitCodes = R"(
Exit codes:
  0  every line scored
  1  internal error
  2  bad command line
  3  invalid configuration
  4  plugin error (unknown verifier, load failure)
  5  some input lines were invalid (each reported in the output with its line number)
)";

constexpr int kExitOk = kAppExitOk, kExitBadInput = 5;

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

struct Scored {
  double score = 0.0;
  json details;
  bool failed = false;  // the verifier threw: score 0, reason in details
};

// A verifier that throws scores 0 with the reason: one bad sample never stops the others.
Scored score_item(const sdk::Verifier& verifier, const Item& item) {
  Scored s;
  sdk::VerifierInput in;
  in.prompt = item.prompt;
  in.completion = item.completion;
  in.ground_truth = item.ground_truth;
  in.dataset = item.verifier;
  in.metadata = item.metadata;
  in.finished = item.finished;
  try {
    sdk::VerifierResult r = verifier.verify(in);
    s.score = r.score;
    if (!r.details.empty()) {
      try {
        s.details = json::parse(r.details);
      } catch (const json::parse_error&) {
        s.details = r.details;  // not JSON: keep the text
      }
    }
  } catch (const std::exception& e) {
    s.failed = true;
    s.details = {{"error", std::string("verifier error: ") + e.what()}};
  } catch (...) {
    s.failed = true;
    s.details = {{"error", "verifier error: an exception not derived from std::exception"}};
  }
  return s;
}

struct Options {
  std::string input, output;
  std::vector<std::string> configs, sets, plugin_paths;
  unsigned threads = 0;
};

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

  // One instance per verifier name: the config's entry when it names it, else the defaults.
  std::map<std::string, std::shared_ptr<sdk::Verifier>> verifiers;
  RuntimeComponents configured = create_components(registry, config);
  for (const auto& slot : configured.verifiers) verifiers.emplace(slot.name, slot.verifier);
  for (const auto& item : items)
    if (item.error.empty() && !verifiers.count(item.verifier))
      verifiers[item.verifier] = registry.create_verifier(item.verifier, nullptr, "line " + std::to_string(item.line) +
                                                                                     " verifier");

  std::vector<Scored> results(items.size());
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < items.size();)
      if (items[i].error.empty()) results[i] = score_item(*verifiers.at(items[i].verifier), items[i]);
  };
  const unsigned threads = std::max(1u, opt.threads ? opt.threads : std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();

  struct Summary {
    std::size_t count = 0, errors = 0;
    double total = 0.0;
  };
  std::map<std::string, Summary> summary;
  std::size_t bad_lines = 0;
  std::ostringstream out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const Item& item = items[i];
    json record = {{"line", item.line}};
    if (!item.id.is_null()) record["id"] = item.id;
    if (!item.error.empty()) {
      ++bad_lines;
      record["error"] = item.error;
    } else {
      record["verifier"] = item.verifier;
      record["score"] = results[i].score;
      if (!results[i].details.is_null()) record["details"] = results[i].details;
      Summary& s = summary[item.verifier];
      ++s.count;
      s.total += results[i].score;
      if (results[i].failed) ++s.errors;
    }
    out << record.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  }
  if (opt.output.empty() || opt.output == "-")
    std::cout << out.str();
  else
    atomic_write_file(opt.output, out.str());

  std::cerr << "verifier              samples  mean score  errors\n";
  for (const auto& [name, s] : summary) {
    char row[256];
    std::snprintf(row, sizeof row, "%-20s %8zu  %10.4f  %6zu\n", name.c_str(), s.count,
                  s.count ? s.total / static_cast<double>(s.count) : 0.0, s.errors);
    std::cerr << row;
  }
  if (bad_lines) {
    for (const auto& item : items)
      if (!item.error.empty())
        std::cerr << "grpo-verify: " << (opt.input == "-" ? std::string("<stdin>") : opt.input) << ":" << item.line << ": "
                  << item.error << "\n";
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
    ("threads,j", po::value(&opt.threads), "worker threads (default: the number of cores)");
  // clang-format on
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
    if (show_help) {
      std::cout << desc << kExitCodes;
      return kExitOk;
    }
    if (opt.input.empty()) throw po::error("--input is required");
  } catch (const po::error& e) {
    return report_usage_error("grpo-verify", e.what());
  }
  return run_app_guarded("grpo-verify", [&] { return run(opt); });
}

}  // namespace grpo::core
