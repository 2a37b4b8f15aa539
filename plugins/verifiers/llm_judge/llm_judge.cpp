// llm_judge: scores a completion by asking a model behind an OpenAI-compatible endpoint
// (such as grpo-serve) to grade it with a rubric, then reading the score from its answer.
// For tasks no rule can check (helpfulness, style, open-ended answers): the "LLM as a judge"
// reward. See README.md in this folder for the options, the details format and the failure
// behaviour.
//
// Why it is built this way:
//   - HTTP goes through the project's shared client (plugins/shared/openai_client): retries with
//     backoff, time-outs, bearer token and error messages are the same as the `openai`
//     rollout backend's.
//   - The host's verifier pool calls verify() from many threads at once. Identical requests
//     (same request body) share one HTTP request and its answer: an LRU map from the body to
//     a shared_future, so that concurrent duplicates wait for the first one's answer and later
//     duplicates reuse it. Failures are never cached (the entry is removed before the waiters
//     see the error), so a later call asks again.
//   - A counting semaphore bounds the requests in flight to `concurrent_calls`, so that a
//     large verifier pool does not flood the judge server.
//   - Any failure (no connection, time-out, HTTP error, an answer without a score) throws
//     std::runtime_error: the host scores the sample 0 and records the message.
//
// Torch-free: grpo::sdk, the static OpenAI client (cpp-httplib underneath) and header-only
// nlohmann-json.
//
// Long (about 600 lines) because it is one plugin in one file, as every verifier is: option
// checks with file:line errors, the rubric template, the shared-request cache and the score
// parsing each need their share, and none is useful outside this verifier.
#include <cerrno>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <regex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "grpo/sdk/config_view.h"
#include "grpo/sdk/plugin.h"
#include "grpo/sdk/text.h"
#include "grpo/sdk/verifier.h"
#include "plugins/shared/openai_client/openai_client.h"

namespace {

namespace sdk = ::grpo::sdk;
using json = nlohmann::json;

constexpr std::size_t kMaxOutputInDetails = 500;  // bytes of the judge's answer in details
constexpr std::size_t kMaxOutputInErrors = 200;   // bytes of the judge's answer in error messages

// Completions and prompts may hold invalid UTF-8 (a generation cut mid-character): replaced,
// never thrown on.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string format_seconds(double s) { return sdk::detail::format_number(s); }

// The whole file; false with the system's reason when it cannot be read (a folder included).
bool read_file(const std::string& path, std::string* out, std::string* error) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    *error = std::strerror(errno);
    return false;
  }
  out->clear();
  char buf[65536];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out->append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int saved = errno;
  std::fclose(f);
  if (failed) *error = std::strerror(saved);
  return !failed;
}

// ---------------------------------------------------------------------------------------
// The rubric template
// ---------------------------------------------------------------------------------------

constexpr const char* kDefaultRubric =
    "You are grading a response to a task. Read the task, the response and the reference answer, "
    "then rate how well the response accomplishes the task, from 0 (wrong, unhelpful or off-topic) "
    "to 10 (correct, complete and clear). When the reference answer is null, judge the response on "
    "its own merits.\n"
    "\n"
    "[Task]\n"
    "{prompt}\n"
    "\n"
    "[Reference answer]\n"
    "{ground_truth}\n"
    "\n"
    "[Response]\n"
    "{completion}\n"
    "\n"
    "Explain your judgement in a few sentences, then give the rating on a final line of the form\n"
    "Score: N\n"
    "where N is an integer from 0 to 10.";

enum class Field { kPrompt, kCompletion, kGroundTruth, kDataset };

struct Piece {
  bool literal = true;
  std::string text;  // literal text
  Field field = Field::kPrompt;
};

// Parses `{prompt}`, `{completion}`, `{ground_truth}`, `{dataset}`, with `{{` / `}}` as literal
// braces (Python's str.format rules). Throws std::invalid_argument with what is wrong.
std::vector<Piece> parse_template(const std::string& text) {
  std::vector<Piece> pieces;
  std::string literal;
  auto flush = [&] {
    if (!literal.empty()) pieces.push_back(Piece{true, std::move(literal), Field::kPrompt});
    literal.clear();
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '}') {
      if (i + 1 < text.size() && text[i + 1] == '}') {
        literal.push_back('}');
        ++i;
        continue;
      }
      throw std::invalid_argument("a single '}' at offset " + std::to_string(i) +
                                  ": write '}}' for a literal brace");
    }
    if (c != '{') {
      literal.push_back(c);
      continue;
    }
    if (i + 1 < text.size() && text[i + 1] == '{') {
      literal.push_back('{');
      ++i;
      continue;
    }
    const std::size_t close = text.find('}', i + 1);
    const std::size_t next_open = text.find('{', i + 1);
    if (close == std::string::npos || (next_open != std::string::npos && next_open < close))
      throw std::invalid_argument("a '{' at offset " + std::to_string(i) +
                                  " is not closed by '}': write '{{' for a literal brace");
    const std::string name = text.substr(i + 1, close - i - 1);
    Field field;
    if (name == "prompt") field = Field::kPrompt;
    else if (name == "completion") field = Field::kCompletion;
    else if (name == "ground_truth") field = Field::kGroundTruth;
    else if (name == "dataset") field = Field::kDataset;
    else
      throw std::invalid_argument("unknown placeholder {" + sdk::clip_utf8(name, 60) +
                                  "} (known: {prompt}, {completion}, {ground_truth}, {dataset}; "
                                  "write '{{' and '}}' for literal braces)");
    flush();
    pieces.push_back(Piece{false, std::string(), field});
    i = close;
  }
  flush();
  return pieces;
}

// The ground truth as the rubric shows it: a JSON string's text unquoted, any other JSON
// value (number, list, object, null) as written, text that is not JSON as it is.
std::string ground_truth_text(std::string_view gt) {
  const json j = json::parse(gt.begin(), gt.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_string()) return j.get<std::string>();
  return std::string(gt);
}

std::string render(const std::vector<Piece>& pieces, const sdk::VerifierInput& in) {
  std::string out;
  for (const Piece& p : pieces) {
    if (p.literal) {
      out += p.text;
      continue;
    }
    switch (p.field) {
      case Field::kPrompt: out.append(in.prompt.data(), in.prompt.size()); break;
      case Field::kCompletion: out.append(in.completion.data(), in.completion.size()); break;
      case Field::kGroundTruth: out += ground_truth_text(in.ground_truth); break;
      case Field::kDataset: out.append(in.dataset.data(), in.dataset.size()); break;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Concurrency helpers
// ---------------------------------------------------------------------------------------

// A counting semaphore (C++17 has none): bounds the HTTP requests in flight.
class Semaphore {
 public:
  explicit Semaphore(std::size_t count) : count_(count) {}
  void acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return count_ > 0; });
    --count_;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++count_;
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t count_;
};

class SemaphoreSlot {
 public:
  explicit SemaphoreSlot(Semaphore& s) : s_(s) { s_.acquire(); }
  ~SemaphoreSlot() { s_.release(); }
  SemaphoreSlot(const SemaphoreSlot&) = delete;
  SemaphoreSlot& operator=(const SemaphoreSlot&) = delete;

 private:
  Semaphore& s_;
};

// What one judge request gave: the parsed score and the answer text.
struct Judgement {
  double score = 0.0;  // as parsed, before clamping
  std::string answer;
};

// ---------------------------------------------------------------------------------------
// The verifier
// ---------------------------------------------------------------------------------------

class LlmJudge final : public sdk::Verifier {
 public:
  // Every option is read here: the host rejects any key the constructor did not read.
  explicit LlmJudge(const sdk::ConfigView& cfg) {
    const std::string url = cfg.require_string("url");
    model_ = cfg.require_string("model");
    if (model_.empty()) cfg.fail("model", "must name the served model (the `model` field of the request)");
    const std::string api_key_env = cfg.get_string("api_key_env", "");
    chat_ = cfg.get_choice("endpoint", "chat", {"chat", "completions"}) == "chat";
    system_ = cfg.get_string("system", "");
    if (!chat_ && cfg.has("system"))
      cfg.fail("system", "a system message needs `endpoint: chat` (the completions endpoint takes one prompt)");

    // The rubric: inline, from a file, or the built-in one.
    const bool has_rubric = cfg.has("rubric"), has_rubric_file = cfg.has("rubric_file");
    const std::string rubric_inline = cfg.get_string("rubric", "");
    const std::string rubric_file = cfg.get_string("rubric_file", "");
    if (has_rubric && has_rubric_file)
      cfg.fail("rubric_file",
               "give either `rubric` (the template text) or `rubric_file` (a file holding it), not both");
    std::string rubric = kDefaultRubric;
    const char* rubric_key = "rubric";
    if (has_rubric) {
      rubric = rubric_inline;
    } else if (has_rubric_file) {
      rubric_key = "rubric_file";
      std::string error;
      if (!read_file(rubric_file, &rubric, &error))
        cfg.fail("rubric_file", "cannot read '" + rubric_file + "': " + error +
                                    " (relative paths start at the working directory)");
    }
    try {
      template_ = parse_template(rubric);
    } catch (const std::invalid_argument& e) {
      cfg.fail(rubric_key, std::string("bad rubric template: ") + e.what());
    }
    bool shows_completion = false;
    for (const Piece& p : template_) shows_completion |= !p.literal && p.field == Field::kCompletion;
    if (!shows_completion)
      cfg.fail(rubric_key,
               "the rubric has no {completion} placeholder: the judge would never see the answer it grades");

    // The score.
    pattern_text_ = cfg.get_string("score_pattern", R"([Ss]core\s*[:=]\s*(-?[0-9]+(?:\.[0-9]+)?))");
    try {
      pattern_ = std::regex(pattern_text_, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      cfg.fail("score_pattern", std::string("not a valid ECMAScript regular expression: ") + e.what());
    }
    if (pattern_.mark_count() != 1)
      cfg.fail("score_pattern", "must have exactly one capture group (the score), has " +
                                    std::to_string(pattern_.mark_count()) + "; use (?:...) for other groups");
    constexpr double kInf = std::numeric_limits<double>::infinity();
    min_score_ = cfg.get_double_in_range("min_score", 0.0, -kInf, kInf, sdk::Interval::kOpen);
    max_score_ = cfg.get_double_in_range("max_score", 10.0, -kInf, kInf, sdk::Interval::kOpen);
    if (!(max_score_ > min_score_))
      cfg.fail("max_score", "must be greater than min_score (" + sdk::detail::format_number(min_score_) + "), got " +
                                sdk::detail::format_number(max_score_));

    // Sampling.
    temperature_ = cfg.get_non_negative_double("temperature", 0.0, "(0 = greedy)");
    seed_ = cfg.get_int("seed", 0);
    max_tokens_ = cfg.get_int_in_range("max_tokens", 256, 1, 1 << 20);

    // HTTP.
    timeout_s_ = cfg.get_double_in_range("timeout_s", 30.0, 0.0, 86400.0, sdk::Interval::kLeftOpen, "seconds");
    max_retries_ = static_cast<int>(cfg.get_int_in_range("max_retries", 1, 0, 100));
    retry_backoff_s_ = cfg.get_double_in_range("retry_backoff_s", 0.5, 0.0, 3600.0);

    // Caching and concurrency.
    cache_ = cfg.get_bool("cache", true);
    cache_size_ = static_cast<std::size_t>(cfg.get_int_at_least("cache_size", 10000, 1));
    concurrent_calls_ = static_cast<std::uint32_t>(cfg.get_int_in_range("concurrent_calls", 16, 1, 1024));
    in_flight_ = std::make_unique<Semaphore>(concurrent_calls_);

    grpo::openai::ClientOptions options;
    options.base_url = url;
    if (!api_key_env.empty()) {
      const char* key = std::getenv(api_key_env.c_str());
      if (key == nullptr)
        cfg.fail("api_key_env",
                 "the environment variable " + api_key_env + " is not set (it should hold the judge's API key)");
      if (*key == '\0') cfg.fail("api_key_env", "the environment variable " + api_key_env + " is empty");
      options.api_key = key;
    }
    options.connect_timeout_s = timeout_s_;
    options.request_timeout_s = timeout_s_;
    options.max_retries = max_retries_;
    options.retry_backoff_s = retry_backoff_s_;
    try {
      client_ = std::make_unique<grpo::openai::Client>(std::move(options));
    } catch (const std::invalid_argument& e) {
      cfg.fail("url", e.what());
    }
    path_ = chat_ ? "/v1/chat/completions" : "/v1/completions";
    endpoint_url_ = client_->url(path_);
  }

  sdk::VerifierResult verify(const sdk::VerifierInput& input) const override {
    const std::string rubric = render(template_, input);
    json body;
    body["model"] = model_;
    if (chat_) {
      json messages = json::array();
      if (!system_.empty()) messages.push_back({{"role", "system"}, {"content", system_}});
      messages.push_back({{"role", "user"}, {"content", rubric}});
      body["messages"] = std::move(messages);
    } else {
      body["prompt"] = rubric;
    }
    body["temperature"] = temperature_;
    body["seed"] = seed_;
    body["max_tokens"] = max_tokens_;

    if (!cache_) return result(ask(body), /*cached=*/false);
    return cached_ask(body);
  }

  std::uint32_t concurrent_calls() const override { return concurrent_calls_; }

 private:
  // ---- The cache: request body -> the (possibly pending) judgement, least recently used last.
  struct Entry {
    std::shared_future<Judgement> judgement;
    std::list<const std::string*>::iterator lru;  // the key, owned by the map node
    std::uint64_t id;                              // which request made it
  };

  sdk::VerifierResult cached_ask(const json& body) const {
    const std::string key = dump(body);
    std::shared_future<Judgement> pending;
    std::promise<Judgement> promise;
    std::uint64_t my_id = 0;
    bool leader = false;
    {
      std::lock_guard<std::mutex> lock(cache_mu_);
      auto it = cache_map_.find(key);
      if (it != cache_map_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second.lru);
        pending = it->second.judgement;
      } else {
        leader = true;
        my_id = ++next_id_;
        pending = promise.get_future().share();
        auto [node, inserted] = cache_map_.emplace(key, Entry{pending, {}, my_id});
        (void)inserted;
        lru_.push_front(&node->first);
        node->second.lru = lru_.begin();
        // Evict the least recently used. A pending entry evicted here still answers the
        // callers that already wait on it; its leader then finds it gone.
        while (cache_map_.size() > cache_size_) {
          const std::string* oldest = lru_.back();
          lru_.pop_back();
          cache_map_.erase(*oldest);
        }
      }
    }
    if (!leader) return result(pending.get(), /*cached=*/true);  // rethrows the leader's failure

    try {
      Judgement j = ask(body);
      promise.set_value(j);
      return result(j, /*cached=*/false);
    } catch (...) {
      // Not cached: removed before the waiters see the failure, so later calls ask again.
      forget(key, my_id);
      promise.set_exception(std::current_exception());
      throw;
    }
  }

  void forget(const std::string& key, std::uint64_t id) const {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_map_.find(key);
    if (it == cache_map_.end() || it->second.id != id) return;
    lru_.erase(it->second.lru);
    cache_map_.erase(it);
  }

  // ---- One judge request (with the client's retries), bounded by the semaphore.
  Judgement ask(const json& body) const {
    json answer;
    {
      SemaphoreSlot slot(*in_flight_);
      try {
        answer = client_->post(path_, body);
      } catch (const grpo::openai::HttpError& e) {
        throw std::runtime_error("llm_judge: " + describe(e) + " (" + endpoint_url_ + ")");
      } catch (const std::exception& e) {
        throw std::runtime_error(std::string("llm_judge: the judge request failed: ") + e.what() + " (" +
                                 endpoint_url_ + ")");
      }
    }
    Judgement j;
    j.answer = answer_text(answer);
    j.score = parse_score(j.answer, answer);
    return j;
  }

  // The client's error, said for this verifier: what happened and what to look at.
  std::string describe(const grpo::openai::HttpError& e) const {
    std::string what = e.what();
    // The client writes "POST <url>: <what>[ (after N retries)]": the URL goes at the end.
    const std::string prefix = "POST " + endpoint_url_ + ": ";
    if (what.rfind(prefix, 0) == 0) what.erase(0, prefix.size());
    if (e.status() >= 200 && e.status() < 300) {  // a 2xx answer that is not JSON
      if (what.rfind("the answer ", 0) == 0) what.replace(0, 11, "the judge's answer ");
      return what;
    }
    if (e.status() != 0)
      return "the judge server answered " + what + (e.retryable() ? std::string() : std::string(" (not retried)"));
    // No answer at all: httplib's error name, after the retries.
    const std::size_t after = what.rfind(" (after ");
    if (after != std::string::npos && max_retries_ > 0) what.erase(after);
    const int attempts = max_retries_ + 1;
    const std::string per = " (timeout_s = " + format_seconds(timeout_s_) + " s, " + std::to_string(attempts) +
                            (attempts == 1 ? " attempt)" : " attempts)");
    if (what == "Read")
      return "time-out or read error: the judge sent no answer within timeout_s, or dropped the connection" + per;
    if (what == "ConnectionTimeout") return "connection time-out: could not connect within timeout_s" + per;
    if (what == "Connection") return "cannot connect to the judge server (is it running at this address?)" + per;
    if (what == "Write") return "write error: the connection broke while the request was sent" + per;
    return "the judge request failed: " + what + per;
  }

  // choices[0].message.content (chat) or choices[0].text (completions).
  std::string answer_text(const json& answer) const {
    const char* field = chat_ ? "choices[0].message.content" : "choices[0].text";
    const json* node = nullptr;
    if (answer.is_object()) {
      auto choices = answer.find("choices");
      if (choices != answer.end() && choices->is_array() && !choices->empty()) {
        const json& first = (*choices)[0];
        if (chat_) {
          auto message = first.is_object() ? first.find("message") : first.end();
          if (first.is_object() && message != first.end() && message->is_object()) {
            auto content = message->find("content");
            if (content != message->end()) node = &*content;
          }
        } else if (first.is_object()) {
          auto text = first.find("text");
          if (text != first.end()) node = &*text;
        }
      }
    }
    if (node == nullptr || !node->is_string()) {
      const std::string type = node == nullptr ? "" : " string (it is " + std::string(node->type_name()) + ")";
      throw std::runtime_error(std::string("llm_judge: the judge's answer has no ") + field + type + ": " +
                               sdk::clip_utf8(dump(answer), kMaxOutputInErrors) + " (" + endpoint_url_ + ")");
    }
    return node->get<std::string>();
  }

  // choices[0].finish_reason, "" when absent.
  static std::string finish_reason(const json& answer) {
    if (!answer.is_object()) return "";
    auto choices = answer.find("choices");
    if (choices == answer.end() || !choices->is_array() || choices->empty() || !(*choices)[0].is_object()) return "";
    auto reason = (*choices)[0].find("finish_reason");
    return reason != (*choices)[0].end() && reason->is_string() ? reason->get<std::string>() : "";
  }

  // The last match of score_pattern in the answer (whose group took part), as a number.
  double parse_score(const std::string& text, const json& answer) const {
    std::smatch last;
    bool found = false;
    try {
      for (auto it = std::sregex_iterator(text.begin(), text.end(), pattern_); it != std::sregex_iterator(); ++it) {
        if (!(*it)[1].matched) continue;
        last = *it;
        found = true;
      }
    } catch (const std::regex_error& e) {
      throw std::runtime_error("llm_judge: score_pattern failed on the judge's answer (" + std::string(e.what()) +
                               "): '" + sdk::clip_utf8(text, kMaxOutputInErrors) + "' (" + endpoint_url_ + ")");
    }
    if (!found) {
      std::string hint;
      if (finish_reason(answer) == "length")
        hint = "; the answer stopped at max_tokens = " + std::to_string(max_tokens_) + ": raise max_tokens";
      throw std::runtime_error("llm_judge: no score in the judge's answer (pattern " + pattern_text_ + hint + "): '" +
                               sdk::clip_utf8(text, kMaxOutputInErrors) + "' (" + endpoint_url_ + ")");
    }
    const std::string captured = last[1].str();
    std::string_view s = captured;
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    if (!s.empty() && s.front() == '+') s.remove_prefix(1);
    double value = 0.0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value, std::chars_format::general);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(value))
      throw std::runtime_error("llm_judge: the score the pattern captured, '" + sdk::clip_utf8(captured, 60) +
                               "', is not a finite number (pattern " + pattern_text_ + "): '" +
                               sdk::clip_utf8(text, kMaxOutputInErrors) + "' (" + endpoint_url_ + ")");
    return value;
  }

  sdk::VerifierResult result(const Judgement& j, bool cached) const {
    const bool clamped = j.score < min_score_ || j.score > max_score_;
    const double s = clamped ? (j.score < min_score_ ? min_score_ : max_score_) : j.score;
    double reward = (s - min_score_) / (max_score_ - min_score_);
    reward = reward < 0.0 ? 0.0 : (reward > 1.0 ? 1.0 : reward);
    nlohmann::ordered_json details;  // in this order in the logs
    details["judge_score"] = j.score;
    details["reward"] = reward;
    details["cached"] = cached;
    details["clamped"] = clamped;
    if (clamped)
      details["reason"] = "the judge's score " + sdk::detail::format_number(j.score) + " is outside [" +
                          sdk::detail::format_number(min_score_) + ", " + sdk::detail::format_number(max_score_) +
                          "]: clamped";
    details["judge_output"] = sdk::clip_utf8(j.answer, kMaxOutputInDetails);
    sdk::VerifierResult r;
    r.score = reward;
    r.details = details.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    return r;
  }

  // Configuration (immutable after construction).
  std::string model_;
  bool chat_ = true;
  std::string system_;
  std::vector<Piece> template_;
  std::string pattern_text_;
  std::regex pattern_;
  double min_score_ = 0.0, max_score_ = 10.0;
  double temperature_ = 0.0;
  std::int64_t seed_ = 0;
  std::int64_t max_tokens_ = 256;
  double timeout_s_ = 30.0;
  int max_retries_ = 1;
  double retry_backoff_s_ = 0.5;
  bool cache_ = true;
  std::size_t cache_size_ = 10000;
  std::uint32_t concurrent_calls_ = 16;
  std::unique_ptr<grpo::openai::Client> client_;
  std::string path_, endpoint_url_;

  // Shared state of the concurrent verify() calls.
  std::unique_ptr<Semaphore> in_flight_;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, Entry> cache_map_;
  mutable std::list<const std::string*> lru_;
  mutable std::uint64_t next_id_ = 0;
};

}  // namespace

GRPO_PLUGIN("llm_judge", "1.0.0", "A model behind an OpenAI-compatible endpoint grades completions with a rubric") {
  registrar.add_verifier<LlmJudge>("llm_judge",
                                   "the judge model's rubric score, scaled from [min_score, max_score] to [0, 1]");
}
