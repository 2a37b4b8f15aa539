// keyword_coverage: the fraction of required keywords that a completion mentions.
//
// Ground truth: a JSON list of keywords (["Paris", "France"]) or one keyword ("Paris").
// Options:
//   case_sensitive (bool, default false)
//   min_fraction   (number in [0, 1], default 0): a coverage below it scores 0
#include <grpo/sdk/plugin.h>
#include <grpo/sdk/verifier.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

class KeywordCoverage : public grpo::sdk::Verifier {
 public:
  // Read every option here: the host rejects options the constructor never read.
  explicit KeywordCoverage(const grpo::sdk::ConfigView& cfg)
      : case_sensitive_(cfg.get_bool("case_sensitive", false)), min_fraction_(cfg.get_double("min_fraction", 0.0)) {
    if (min_fraction_ < 0.0 || min_fraction_ > 1.0) cfg.fail("min_fraction", "must be in [0, 1]");
  }

  // Const and reentrant: called concurrently from the trainer's verifier pool.
  grpo::sdk::VerifierResult verify(const grpo::sdk::VerifierInput& in) const override {
    const nlohmann::json truth = nlohmann::json::parse(in.ground_truth);  // a throw scores 0, reason logged
    std::vector<std::string> keywords;
    if (truth.is_string()) {
      keywords.push_back(truth.get<std::string>());
    } else if (truth.is_array()) {
      for (const auto& k : truth) keywords.push_back(k.get<std::string>());
    } else {
      throw std::invalid_argument("ground truth must be a keyword or a list of keywords, got " + truth.dump());
    }
    if (keywords.empty()) throw std::invalid_argument("ground truth lists no keywords");

    const std::string text = case_sensitive_ ? std::string(in.completion) : lower(std::string(in.completion));
    nlohmann::json missing = nlohmann::json::array();
    std::size_t found = 0;
    for (const auto& k : keywords) {
      if (text.find(case_sensitive_ ? k : lower(k)) != std::string::npos) ++found;
      else missing.push_back(k);
    }
    const double coverage = static_cast<double>(found) / static_cast<double>(keywords.size());
    grpo::sdk::VerifierResult result;
    result.score = coverage < min_fraction_ ? 0.0 : coverage;
    result.details = nlohmann::json{{"coverage", coverage}, {"missing", missing}}.dump();
    return result;
  }

 private:
  bool case_sensitive_;
  double min_fraction_;
};

}  // namespace

GRPO_PLUGIN("custom_reward", "0.1.0", "Example out-of-tree reward plugin") {
  registrar.add_verifier<KeywordCoverage>("keyword_coverage", "fraction of required keywords mentioned");
}
