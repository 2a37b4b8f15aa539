#include "core/train/sample_log.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "core/tokenizer/tokenizer.h"
#include "core/util/fs.h"

namespace grpo::core {

namespace {

using json = nlohmann::ordered_json;

std::string decode(const Tokenizer& tokenizer, const std::vector<std::int64_t>& ids, std::size_t from, std::size_t to) {
  std::vector<int> part;
  for (std::size_t i = from; i < to; ++i)
    if (ids[i] >= 0 && ids[i] < tokenizer.vocab_size()) part.push_back(static_cast<int>(ids[i]));
  try {
    return tokenizer.decode(part);
  } catch (const std::exception& e) {
    return std::string("<undecodable: ") + e.what() + ">";
  }
}

}  // namespace

SampleLog::SampleLog(std::string path, const Tokenizer& tokenizer, std::int64_t every, std::int64_t per_step,
                     std::int64_t resumed_step)
    : path_(std::move(path)), tokenizer_(tokenizer), every_(every), per_step_(per_step) {
  if (resumed_step < 0 || !std::filesystem::exists(path_)) return;
  std::ifstream in(path_);
  std::string line, kept;
  std::size_t dropped = 0;
  while (std::getline(in, line)) {
    const json row = json::parse(line, nullptr, false);
    if (row.is_discarded() || !row.contains("step") || row["step"].get<std::int64_t>() > resumed_step) {
      ++dropped;  // written after the checkpoint we resume from (or a torn last line)
      continue;
    }
    kept += line + "\n";
  }
  if (dropped > 0) {
    atomic_write_file(path_, kept);
    spdlog::info("samples.jsonl: dropped {} line(s) written after step {}", dropped, resumed_step);
  }
}

std::string SampleLog::trajectory_json(const Group& g, const Sample& s) const {
  json row;
  row["prompt"] = decode(tokenizer_, g.prompt_ids, 0, g.prompt_ids.size());
  json truths = json::array();
  for (const auto& t : g.example.targets) {
    const json v = json::parse(t.ground_truth, nullptr, false);
    truths.push_back(v.is_discarded() ? json(t.ground_truth) : v);
  }
  row["ground_truth"] = truths.size() == 1 ? truths[0] : truths;
  json turns = json::array();
  for (std::size_t a = 0; a < s.response_ids.size();) {
    const bool policy = s.is_policy_token(a);
    std::size_t b = a;
    while (b < s.response_ids.size() && s.is_policy_token(b) == policy) ++b;
    turns.push_back({{"role", policy ? "policy" : "observation"}, {"text", decode(tokenizer_, s.response_ids, a, b)}});
    a = b;
  }
  row["turns"] = std::move(turns);
  json calls = json::array();
  for (const auto& c : s.tool_calls)
    calls.push_back({{"tool", c.tool},
                     {"arguments", c.arguments},
                     {"observation", c.observation},
                     {"is_error", c.is_error},
                     {"timed_out", c.timed_out},
                     {"seconds", c.seconds}});
  row["tool_calls"] = std::move(calls);
  row["reward"] = s.reward;
  double sum = 0, n = 0;
  for (std::size_t t = 0; t < s.advantages.size(); ++t)
    if (s.is_policy_token(t)) sum += s.advantages[t], n += 1;
  row["advantage"] = n > 0 ? sum / n : 0.0;
  row["correct"] = s.correct;
  row["finished"] = s.finished;
  std::int64_t observation = 0;
  for (std::size_t t = 0; t < s.response_ids.size(); ++t) observation += s.is_policy_token(t) ? 0 : 1;
  row["response_tokens"] = static_cast<std::int64_t>(s.response_ids.size());
  row["observation_tokens"] = observation;
  return row.dump(-1, ' ', false, json::error_handler_t::replace);
}

void SampleLog::write(std::int64_t step, const std::vector<Group>& groups, const std::vector<Group>& dropped) const {
  std::string lines;
  std::size_t written = 0;
  auto add = [&](const std::vector<Group>& from, bool kept) {
    for (std::size_t gi = 0; gi < from.size() && written < static_cast<std::size_t>(per_step_); ++gi) {
      if (from[gi].samples.empty()) continue;
      json head;
      head["step"] = step;
      head["group"] = gi;
      head["sample"] = 0;
      std::string body = trajectory_json(from[gi], from[gi].samples[0]);
      body.pop_back();  // merge: {head..., body..., "kept"}
      lines += head.dump().substr(0, head.dump().size() - 1) + "," + body.substr(1) + ",\"kept\":" + (kept ? "true" : "false") + "}\n";
      ++written;
    }
  };
  add(groups, true);
  add(dropped, false);
  if (lines.empty()) return;
  std::FILE* f = std::fopen(path_.c_str(), "ab");
  if (!f) {
    spdlog::warn("samples.jsonl: cannot open {} for appending", path_);
    return;
  }
  std::fwrite(lines.data(), 1, lines.size(), f);
  std::fclose(f);
}

}  // namespace grpo::core
