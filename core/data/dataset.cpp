#include "core/data/dataset.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <random>
#include <utility>

#include "core/config/config_access.h"
#include "core/util/json_limits.h"
#include "core/util/strings.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------------
// Portable randomness: std::mt19937_64 is specified bit for bit by the standard; the
// distributions are not, so draws use this rejection rule instead.
// ---------------------------------------------------------------------------------------

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Independent streams of one run seed: the epoch orders and each source's subset.
constexpr std::uint64_t kEpochStream = 1, kSubsetStream = 2;

std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ index);
}

// FNV-1a: a portable hash of a source's key path (std::hash differs between libraries).
std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xCBF29CE484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ULL;
  }
  return h;
}

// ---------------------------------------------------------------------------------------
// The raw text of values. The line is parsed by nlohmann (which validates it and gives the
// types); this scanner, run only on validated JSON, finds where each member's value is
// written, so that ground truths and metadata keep the dataset's own spelling of numbers.
// ---------------------------------------------------------------------------------------

struct Member {
  std::string key;           // decoded
  std::string_view raw_key;  // with its quotes and escapes, as written
  std::string_view value;    // as written
};

bool is_json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::size_t skip_space(std::string_view s, std::size_t i) {
  while (i < s.size() && is_json_space(s[i])) ++i;
  return i;
}

// s[i] == '"': one past the closing quote.
std::size_t string_end(std::string_view s, std::size_t i) {
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') ++i;
    else if (s[i] == '"') return i + 1;
  }
  return s.size();
}

// One past the end of the value starting at s[i].
std::size_t value_end(std::string_view s, std::size_t i) {
  if (i >= s.size()) return s.size();
  if (s[i] == '"') return string_end(s, i);
  if (s[i] == '{' || s[i] == '[') {
    std::size_t depth = 0;
    while (i < s.size()) {
      const char c = s[i];
      if (c == '"') {
        i = string_end(s, i);
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      else if ((c == '}' || c == ']') && --depth == 0) return i + 1;
      ++i;
    }
    return s.size();
  }
  while (i < s.size() && !is_json_space(s[i]) && s[i] != ',' && s[i] != '}' && s[i] != ']') ++i;
  return i;
}

std::string_view trim_json(std::string_view s) {
  std::size_t b = skip_space(s, 0), e = s.size();
  while (e > b && is_json_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// The members of a validated JSON object text, in written order (duplicates included).
std::vector<Member> object_members(std::string_view object_text) {
  std::vector<Member> out;
  const std::string_view s = trim_json(object_text);
  if (s.empty() || s.front() != '{') return out;
  std::size_t i = skip_space(s, 1);
  while (i < s.size() && s[i] == '"') {
    Member m;
    const std::size_t key_end = string_end(s, i);
    m.raw_key = s.substr(i, key_end - i);
    m.key = m.raw_key.find('\\') == std::string_view::npos
                ? std::string(m.raw_key.substr(1, m.raw_key.size() - 2))
                : json::parse(m.raw_key).get<std::string>();
    i = skip_space(s, key_end);
    i = skip_space(s, i + 1);  // past ':'
    const std::size_t end = value_end(s, i);
    m.value = s.substr(i, end - i);
    out.push_back(std::move(m));
    i = skip_space(s, end);
    if (i < s.size() && s[i] == ',') i = skip_space(s, i + 1);
    else break;
  }
  return out;
}

// The elements of a validated JSON array text, as written.
std::vector<std::string_view> array_elements(std::string_view array_text) {
  std::vector<std::string_view> out;
  const std::string_view s = trim_json(array_text);
  if (s.empty() || s.front() != '[') return out;
  std::size_t i = skip_space(s, 1);
  while (i < s.size() && s[i] != ']') {
    const std::size_t end = value_end(s, i);
    out.push_back(s.substr(i, end - i));
    i = skip_space(s, end);
    if (i < s.size() && s[i] == ',') i = skip_space(s, i + 1);
    else break;
  }
  return out;
}

// The last member named `key` (nlohmann keeps the last of duplicate keys too).
const Member* find_member(const std::vector<Member>& members, const std::string& key) {
  for (auto it = members.rbegin(); it != members.rend(); ++it)
    if (it->key == key) return &*it;
  return nullptr;
}

// ---------------------------------------------------------------------------------------
// Row mapping
// ---------------------------------------------------------------------------------------

std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::object: return "an object";
    case json::value_t::array: return v.empty() ? "an empty list" : "a list of " + std::to_string(v.size());
    default: return "a number";
  }
}

// At most `limit` bytes of user text in a message, cut on a UTF-8 character boundary.
std::string clip(std::string_view s, std::size_t limit) {
  if (s.size() <= limit) return std::string(s);
  std::size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // continuation byte
  return std::string(s.substr(0, cut)) + "...";
}

// "[json.exception.parse_error.101] parse error at line 1, column 5: ..." ->
// "parse error at column 5: ..." (the JSON text is one line of the file).
std::string parser_reason(const char* what) {
  std::string s(what);
  if (!s.empty() && s.front() == '[') {
    const std::size_t close = s.find("] ");
    if (close != std::string::npos) s.erase(0, close + 2);
  }
  const std::string line1 = "at line 1, column ";
  if (const std::size_t at = s.find(line1); at != std::string::npos) s.replace(at, line1.size(), "at column ");
  return clip(s, 300);  // "last read: '...'" can echo a whole long string
}

constexpr const char* kChatListForm = "a chat list [{\"role\": ..., \"content\": ...}, ...]";

struct Columns {
  std::string prompt, ground_truth, label;  // label "" = none: every verifier scores the row
  bool prompt_may_be_text = true;
  const char* format = "";
  std::string completion;  // "" = the completion is the chat's trailing assistant message
};

Columns columns_for(DataFormat format, const DataOptions& o) {
  Columns c;
  switch (format) {
    case DataFormat::kOpenInstruct:
      c = {"messages", "ground_truth", "dataset", false, "open_instruct"};
      break;
    case DataFormat::kVerl:
      c = {"prompt", "reward_model.ground_truth", "data_source", true, "verl"};
      break;
    default:
      c = {"prompt", "ground_truth", "", true, "trl", "completion"};
      break;
  }
  if (!o.completion_column.empty()) c.completion = o.completion_column;
  if (!o.prompt_column.empty()) c.prompt = o.prompt_column;
  if (!o.ground_truth_column.empty()) c.ground_truth = o.ground_truth_column;
  if (!o.dataset_column.empty()) c.label = o.dataset_column;
  return c;
}

// A column of the row: its value, its text as written, and the top-level column it is in.
struct Located {
  const json* value = nullptr;
  std::string_view raw;
  std::string top_key;
};

Located locate(const json& row, const std::vector<Member>& members, const std::string& column) {
  Located out;
  if (column.empty()) return out;
  if (auto it = row.find(column); it != row.end()) {
    out.value = &*it;
    if (const Member* m = find_member(members, column)) out.raw = m->value;
    out.top_key = column;
    return out;
  }
  // A dotted path: "reward_model.ground_truth".
  const json* cur = &row;
  std::vector<Member> level = members;
  std::string_view raw;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = column.find('.', start);
    const std::string seg = column.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!cur->is_object()) return {};
    auto it = cur->find(seg);
    if (it == cur->end()) return {};
    const Member* m = find_member(level, seg);
    if (!m) return {};
    if (start == 0) out.top_key = seg;
    cur = &*it;
    raw = m->value;
    if (dot == std::string::npos) break;
    level = object_members(raw);
    start = dot + 1;
  }
  out.value = cur;
  out.raw = raw;
  return out;
}

// The value's JSON text as written in the row; re-serialized only if the scanner found no
// text (it always does for JSON that nlohmann accepted).
std::string written_text(std::string_view raw, const json& value) {
  const std::string_view t = trim_json(raw);
  return t.empty() ? value.dump() : std::string(t);
}

std::string column_list(const std::vector<Member>& members) {
  std::vector<std::string> names;
  for (const auto& m : members) {
    const std::string name = "'" + clip(m.key, 40) + "'";
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;  // a duplicate key
    if (names.size() == 12) {
      names.push_back("...");
      break;
    }
    names.push_back(name);
  }
  return names.empty() ? "none (an empty object)" : join(names, ", ");
}

class RowMapper {
 public:
  RowMapper(std::string_view text, const DataOptions& options, const std::string& source, std::size_t line)
      : text_(text), options_(options), where_(source + ":" + std::to_string(line)) {
    example_.source = source;
    example_.line = line;
  }

  Example map() {
    parse();
    members_ = object_members(text_);
    const Columns cols = columns_for(format(), options_);
    map_prompt(cols);
    map_completion(cols);
    map_targets(cols);
    map_metadata();
    return std::move(example_);
  }

 private:
  [[noreturn]] void fail(const std::string& message) const { throw DataError(where_ + ": " + message); }

  void parse() {
    if (auto deep = json_nesting_error(text_))
      fail(*deep + "; expected one JSON object per line");
    try {
      row_ = json::parse(text_.begin(), text_.end());
    } catch (const json::parse_error& e) {
      fail("not valid JSON (" + parser_reason(e.what()) + "); expected one JSON object per line");
    } catch (const json::exception& e) {  // out_of_range: a number too large for a double
      fail("cannot read the row (" + parser_reason(e.what()) + "); write such a number as a string");
    }
    if (!row_.is_object())
      fail("expected a JSON object (one row per line), got " + describe(row_));
  }

  DataFormat format() const {
    if (options_.format != DataFormat::kAuto) return options_.format;
    if (row_.contains("messages")) return DataFormat::kOpenInstruct;
    if (row_.contains("reward_model")) return DataFormat::kVerl;
    if (row_.contains("prompt") || !options_.prompt_column.empty()) return DataFormat::kTrl;
    fail("cannot tell the row's format (data.format: auto): expected a 'messages' column (open_instruct), "
         "'reward_model' (verl) or 'prompt' (trl); the row's columns: " +
         column_list(members_) + ". Set data.format and data.prompt_column");
  }

  void map_prompt(const Columns& cols) {
    const std::string what = cols.prompt_may_be_text ? std::string("a string or ") + kChatListForm : kChatListForm;
    const Located p = locate(row_, members_, cols.prompt);
    if (!p.value)
      fail("no prompt column '" + cols.prompt + "' (" + cols.format + " format; expected " + what +
           "); the row's columns: " + column_list(members_) + ". Name the prompt column with data.prompt_column");
    used_.push_back(p.top_key);
    const json& v = *p.value;
    const std::string col = "column '" + cols.prompt + "'";
    if (v.is_string() && cols.prompt_may_be_text) {
      example_.text = v.get<std::string>();
      if (example_.text.empty()) fail(col + ": expected " + what + ", got an empty string");
      return;
    }
    if (!v.is_array() || v.empty()) fail(col + ": expected " + what + ", got " + describe(v));
    for (std::size_t i = 0; i < v.size(); ++i) {
      const json& m = v[i];
      const std::string at = col + " message " + std::to_string(i);
      const char* expected = ": expected a chat message {\"role\": string, \"content\": string}, got ";
      if (!m.is_object()) fail(at + expected + describe(m));
      auto role = m.find("role");
      auto content = m.find("content");
      if (role == m.end() || !role->is_string())
        fail(at + expected + (role == m.end() ? std::string("no \"role\"") : "\"role\": " + describe(*role)));
      // The other fields (tool_calls, name, tool_call_id, ...) go to the chat template too; with
      // them, content may be null or a list of parts.
      json extra = json::object();
      for (auto it = m.begin(); it != m.end(); ++it)
        if (it.key() != "role" && it.key() != "content") extra[it.key()] = it.value();
      const bool other_content = content != m.end() && !extra.empty() && (content->is_null() || content->is_array());
      if (content == m.end() || (!content->is_string() && !other_content))
        fail(at + expected +
             (content == m.end() ? std::string("no \"content\"") : "\"content\": " + describe(*content)));
      if (other_content) extra["content"] = *content;
      example_.messages.push_back({role->get<std::string>(), content->is_string() ? content->get<std::string>() : "",
                                   extra.empty() ? "" : extra.dump()});
    }
    // open-instruct's RLVR tokenization drops a trailing assistant turn (the reference
    // answer of an SFT-style row): the policy must write it. It is the row's completion (SFT).
    if (example_.messages.size() > 1 && example_.messages.back().role == "assistant") {
      example_.completion = example_.messages.back().content;
      example_.messages.pop_back();
    }
  }

  // The supervised target (grpo-sft): a completion column (TRL: a string, or a chat list
  // whose last message is the assistant's), else the prompt chat's trailing assistant turn.
  void map_completion(const Columns& cols) {
    if (!cols.completion.empty()) {
      const Located c = locate(row_, members_, cols.completion);
      if (c.value) {
        const json& v = *c.value;
        const bool chat = v.is_array() && !v.empty() && v.back().is_object() &&
                          v.back().value("role", json()) == "assistant" && v.back().contains("content") &&
                          v.back()["content"].is_string();
        if (v.is_string() || chat) {
          used_.push_back(c.top_key);
          example_.completion = chat ? v.back()["content"].get<std::string>() : v.get<std::string>();
        } else if (options_.require_completion) {
          fail("column '" + cols.completion + "': expected a string or a chat list ending with an assistant message, got " +
               describe(v));
        }  // else: not a completion; grpo-run hands it to the verifiers as metadata
      }
    }
    if (options_.require_completion && example_.completion.empty())
      fail("no completion to train on: expected a non-empty column '" +
           (cols.completion.empty() ? std::string("completion") : cols.completion) +
           "' (trl) or a chat ending with an assistant message (open_instruct); the row's columns: " +
           column_list(members_) + ". Name the column with data.completion_column");
  }

  void map_targets(const Columns& cols) {
    const Located gt = locate(row_, members_, cols.ground_truth);
    if (!gt.value && !options_.require_ground_truth) return;  // supervised rows need none
    if (!gt.value)
      fail("no ground truth column '" + cols.ground_truth + "' (" + cols.format + " format); the row's columns: " +
           column_list(members_) + ". Name the ground truth column with data.ground_truth_column");
    used_.push_back(gt.top_key);
    const Located label = locate(row_, members_, cols.label);
    if (!label.value || label.value->is_null()) {
      if (label.value) used_.push_back(label.top_key);
      example_.targets.push_back({"", written_text(gt.raw, *gt.value)});
      return;
    }
    used_.push_back(label.top_key);
    const json& l = *label.value;
    const std::string col = "column '" + cols.label + "'";
    if (l.is_string()) {
      example_.targets.push_back({l.get<std::string>(), written_text(gt.raw, *gt.value)});
      return;
    }
    if (!l.is_array() || l.empty())
      fail(col + ": expected a verifier label (a string) or a non-empty list of them aligned with the ground "
                 "truth list, got " + describe(l));
    for (std::size_t i = 0; i < l.size(); ++i)
      if (!l[i].is_string())
        fail(col + " item " + std::to_string(i) + ": expected a verifier label (a string), got " + describe(l[i]));
    if (!gt.value->is_array() || gt.value->size() != l.size())
      fail(col + " is a list of " + std::to_string(l.size()) + " verifier labels, so column '" + cols.ground_truth +
           "' must be a list of " + std::to_string(l.size()) + " ground truths (one per label), got " +
           describe(*gt.value));
    const std::vector<std::string_view> truths = array_elements(gt.raw);
    for (std::size_t i = 0; i < l.size(); ++i)
      example_.targets.push_back(
          {l[i].get<std::string>(), written_text(i < truths.size() ? truths[i] : std::string_view(), (*gt.value)[i])});
  }

  // The other top-level columns, as written (the last of duplicate keys).
  void map_metadata() {
    std::string out = "{";
    for (std::size_t i = 0; i < members_.size(); ++i) {
      const Member& m = members_[i];
      if (std::find(used_.begin(), used_.end(), m.key) != used_.end()) continue;
      if (find_member(members_, m.key) != &m) continue;
      if (out.size() > 1) out += ',';
      out.append(m.raw_key).append(":").append(m.value);
    }
    example_.metadata = out + "}";
  }

  std::string_view text_;
  const DataOptions& options_;
  std::string where_;
  json row_;
  std::vector<Member> members_;
  std::vector<std::string> used_;  // top-level columns read for prompt, ground truth, label
  Example example_;
};

// ---------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------

std::string for_key(const std::string& key_path) { return key_path.empty() ? "" : " (" + key_path + ")"; }

std::string read_data_file(const std::string& path, const std::string& key_path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw DataError(path + ": cannot open the data file" + for_key(key_path) + ": it is a directory");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f)
    throw DataError(path + ": cannot open the data file" + for_key(key_path) + ": " + std::strerror(errno));
  std::string content;
  char buf[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) content.append(buf, n);
  if (std::ferror(f.get()))
    throw DataError(path + ": cannot read the data file" + for_key(key_path) + ": " + std::strerror(errno));
  return content;
}

constexpr std::size_t kBadRowsLogged = 5;

std::vector<Example> load_file(const std::string& path, const std::string& key_path, const DataOptions& options,
                               std::size_t* bad_rows) {
  const std::string content = read_data_file(path, key_path);
  std::vector<Example> rows;
  std::size_t bad = 0, line_no = 0, start = 0;
  while (start < content.size()) {
    std::size_t end = content.find('\n', start);
    if (end == std::string::npos) end = content.size();
    std::string_view line(content.data() + start, end - start);
    start = end + 1;
    ++line_no;
    if (line_no == 1 && starts_with(line, "\xEF\xBB\xBF")) line.remove_prefix(3);  // UTF-8 byte order mark
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (trim(line).empty()) continue;
    try {
      rows.push_back(parse_example(line, options, path, line_no));
    } catch (const DataError& e) {
      if (!options.skip_bad_rows) throw;
      if (++bad <= kBadRowsLogged) spdlog::warn("skipped a malformed row (data.skip_bad_rows): {}", e.what());
    }
  }
  if (bad > 0)
    spdlog::warn("{}: skipped {} malformed row(s) of {} (data.skip_bad_rows)", path, bad, bad + rows.size());
  if (rows.empty())
    throw DataError(path + ": no usable rows" + for_key(key_path) +
                    (bad > 0 ? ": all " + std::to_string(bad) + " rows are malformed (skipped by data.skip_bad_rows)"
                             : ": the file has no JSON lines"));
  *bad_rows = bad;
  return rows;
}

// Rows that `source` takes from a file of `file_rows` rows.
std::size_t mixture_size(const DataSource& source, std::size_t file_rows) {
  const std::string name = source.path + for_key(source.key_path);
  if (source.count > 0) return static_cast<std::size_t>(source.count);
  if (!std::isfinite(source.weight) || source.weight <= 0)
    throw DataError(name + ": weight must be a finite number > 0, got " + std::to_string(source.weight));
  const double target = std::round(source.weight * static_cast<double>(file_rows));
  constexpr double kMaxRows = 1e9;
  if (target > kMaxRows)
    throw DataError(name + ": weight " + std::to_string(source.weight) + " x " + std::to_string(file_rows) +
                    " rows is more than 10^9 rows");
  if (target < 1)
    throw DataError(name + ": weight " + std::to_string(source.weight) + " x " + std::to_string(file_rows) +
                    " rows rounds to 0 rows; raise the weight or give `count`");
  return static_cast<std::size_t>(target);
}

DataFormat parse_format(const std::string& name) {
  if (name == "open_instruct") return DataFormat::kOpenInstruct;
  if (name == "trl") return DataFormat::kTrl;
  if (name == "verl") return DataFormat::kVerl;
  return DataFormat::kAuto;
}

std::vector<DataSource> data_sources(const sdk::ConfigValue& root, const char* key) {
  std::vector<DataSource> out;
  const sdk::ConfigValue* list = find_config_node(root, {"data", key});
  const std::string list_path = std::string("data.") + key;
  if (!list || list->is_null()) return out;
  if (!list->is_sequence())
    fail_at_key(list, list_path, std::string("expected a list of data files, got ") + list->type_description());
  for (std::size_t i = 0; i < list->items().size(); ++i) {
    const sdk::ConfigValue& item = list->items()[i];
    DataSource s;
    s.key_path = list_path + "[" + std::to_string(i) + "]";
    if (item.is_scalar()) {  // not normalized: the bare path form
      s.path = item.scalar();
    } else {
      sdk::ConfigView view(&item, s.key_path);
      s.path = view.require_string("path");
      if (view.has("weight") && view.has("count")) view.fail("count", "give either 'weight' or 'count', not both");
      s.weight = view.get_double("weight", 1.0);
      s.count = view.get_int("count", 0);
      if (!std::isfinite(s.weight) || s.weight <= 0) view.fail("weight", "expected a finite number > 0");
      if (view.has("count") && s.count < 1) view.fail("count", "expected an integer >= 1");
    }
    if (s.path.empty()) fail_at_key(&item, s.key_path, "expected a file path, got \"\"");
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

// Draws below 2^64 mod bound are rejected so that the rest fall into `bound` classes of
// equal size, then r mod bound.
std::uint64_t uniform_below(std::mt19937_64& gen, std::uint64_t bound) {
  const std::uint64_t reject_below = (0 - bound) % bound;
  std::uint64_t r = gen();
  while (r < reject_below) r = gen();
  return r % bound;
}

// ---------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------

DataOptions data_options(const sdk::ConfigValue& root) {
  sdk::ConfigView view(find_config_node(root, {"data"}), "data");
  DataOptions o;
  o.train = data_sources(root, "train");
  o.eval = data_sources(root, "eval");
  // Fallbacks: the member defaults (a validated configuration holds every key).
  o.format = parse_format(view.get_choice("format", data_format_name(o.format), {"auto", "open_instruct", "trl", "verl"}));
  o.prompt_column = view.get_string("prompt_column", o.prompt_column);
  o.ground_truth_column = view.get_string("ground_truth_column", o.ground_truth_column);
  o.dataset_column = view.get_string("dataset_column", o.dataset_column);
  o.completion_column = view.get_string("completion_column", o.completion_column);
  o.skip_bad_rows = view.get_bool("skip_bad_rows", o.skip_bad_rows);
  o.shuffle = view.get_bool("shuffle", o.shuffle);
  return o;
}

const char* data_format_name(DataFormat format) {
  switch (format) {
    case DataFormat::kOpenInstruct: return "open_instruct";
    case DataFormat::kTrl: return "trl";
    case DataFormat::kVerl: return "verl";
    case DataFormat::kAuto: break;
  }
  return "auto";
}

Example parse_example(std::string_view json_line, const DataOptions& options, const std::string& source,
                      std::size_t line) {
  return RowMapper(json_line, options, source, line).map();
}

std::vector<Example> load_jsonl(const std::string& path, const DataOptions& options, DataLoadReport* report) {
  std::size_t bad = 0;
  std::vector<Example> rows = load_file(path, "", options, &bad);
  if (report) *report = DataLoadReport{rows.size(), bad, {rows.size()}};
  return rows;
}

std::vector<Example> load_mixture(const std::vector<DataSource>& sources, const DataOptions& options,
                                  std::uint64_t seed, DataLoadReport* report) {
  DataLoadReport r;
  std::vector<Example> out;
  for (const DataSource& source : sources) {
    std::size_t bad = 0;
    std::vector<Example> rows = load_file(source.path, source.key_path, options, &bad);
    r.bad_rows_skipped += bad;
    const std::size_t n = rows.size();
    const std::size_t target = mixture_size(source, n);
    out.reserve(out.size() + target);
    for (std::size_t repeat = 0; repeat < target / n; ++repeat) out.insert(out.end(), rows.begin(), rows.end());
    if (const std::size_t extra = target % n; extra > 0) {
      // A partial Fisher-Yates shuffle picks `extra` distinct rows; they keep file order.
      const std::string& stream_name = source.key_path.empty() ? source.path : source.key_path;
      std::mt19937_64 gen(derive_seed(seed, kSubsetStream, fnv1a(stream_name)));
      std::vector<std::size_t> pick(n);
      for (std::size_t i = 0; i < n; ++i) pick[i] = i;
      for (std::size_t i = 0; i < extra; ++i) std::swap(pick[i], pick[i + uniform_below(gen, n - i)]);
      pick.resize(extra);
      std::sort(pick.begin(), pick.end());
      for (std::size_t i : pick) out.push_back(rows[i]);
    }
    r.rows_per_source.push_back(target);
    if (target != n)
      spdlog::info("{}{}: {} rows taken from the file's {}", source.path, for_key(source.key_path), target, n);
  }
  r.rows = out.size();
  if (report) *report = std::move(r);
  return out;
}

PromptSampler::PromptSampler(std::size_t num_rows, std::uint64_t seed, bool shuffle)
    : num_rows_(num_rows), seed_(seed), shuffle_(shuffle) {
  if (num_rows == 0) throw std::invalid_argument("PromptSampler: no rows to draw from (num_rows = 0)");
  load_epoch(0);
}

std::vector<std::size_t> PromptSampler::epoch_order(std::uint64_t epoch) const {
  std::vector<std::size_t> order(num_rows_);
  for (std::size_t i = 0; i < num_rows_; ++i) order[i] = i;
  if (!shuffle_) return order;
  // Fisher-Yates, from the last position down: swap position i with a uniform j in [0, i].
  std::mt19937_64 gen(derive_seed(seed_, kEpochStream, epoch));
  for (std::size_t i = num_rows_ - 1; i > 0; --i) std::swap(order[i], order[uniform_below(gen, i + 1)]);
  return order;
}

void PromptSampler::load_epoch(std::uint64_t epoch) {
  order_ = epoch_order(epoch);
  order_epoch_ = epoch;
}

std::vector<std::size_t> PromptSampler::next(std::size_t n) {
  std::vector<std::size_t> out;
  out.reserve(n);
  while (out.size() < n) {
    if (order_epoch_ != position_.epoch) load_epoch(position_.epoch);
    const std::size_t take = std::min<std::size_t>(n - out.size(), num_rows_ - position_.offset);
    out.insert(out.end(), order_.begin() + static_cast<std::ptrdiff_t>(position_.offset),
               order_.begin() + static_cast<std::ptrdiff_t>(position_.offset + take));
    position_.offset += take;
    if (position_.offset == num_rows_) position_ = {position_.epoch + 1, 0};
  }
  return out;
}

PromptSampler::Position PromptSampler::position() const { return position_; }

void PromptSampler::set_position(const Position& position) {
  if (position.offset > num_rows_)
    throw DataError("data position epoch " + std::to_string(position.epoch) + " offset " +
                    std::to_string(position.offset) + " is past the end of the training data (" +
                    std::to_string(num_rows_) + " rows): the data changed since the checkpoint was written");
  position_ = position.offset == num_rows_ ? Position{position.epoch + 1, 0} : position;
}

std::string render_prompt(const Example& example, const ChatTemplate& chat_template, const ChatRenderOptions& options) {
  if (example.messages.empty()) return example.text;
  try {
    return chat_template.render(example.messages, options);
  } catch (const TokenizerError& e) {
    throw DataError(example.where() + ": " + e.what());
  }
}

}  // namespace grpo::core
