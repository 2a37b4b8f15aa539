#include "core/model/model_config.h"

#include <nlohmann/json.hpp>

#include "core/util/fs.h"
#include "core/util/json_limits.h"
#include "core/util/strings.h"

namespace grpo::core {

namespace {

using json = nlohmann::json;

struct ArchInfo {
  ModelArchitecture arch;
  const char* name;
  const char* model_type;
};
constexpr ArchInfo kArchitectures[] = {
    {ModelArchitecture::Qwen2, "Qwen2ForCausalLM", "qwen2"},
    {ModelArchitecture::Qwen3, "Qwen3ForCausalLM", "qwen3"},
    {ModelArchitecture::Llama, "LlamaForCausalLM", "llama"},
};

const ArchInfo& info_of(ModelArchitecture arch) {
  for (const auto& a : kArchitectures)
    if (a.arch == arch) return a;
  throw std::logic_error("unknown ModelArchitecture");
}

// Typed access to config.json keys with errors that name the file and key.
class Reader {
 public:
  Reader(const json& root, std::string source) : root_(root), source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw ModelConfigError(source_ + ": " + key + ": " + what);
  }

  const json* find(const std::string& key) const {
    auto it = root_.find(key);
    if (it == root_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  int64_t require_int(const std::string& key) const {
    const json* v = find(key);
    if (!v) fail(key, "missing (expected a positive integer)");
    return positive_int(*v, key);
  }
  int64_t get_int(const std::string& key, int64_t fallback) const {
    const json* v = find(key);
    return v ? positive_int(*v, key) : fallback;
  }
  double get_double(const std::string& key, double fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number()) fail(key, "expected a number, got " + std::string(v->type_name()));
    return v->get<double>();
  }
  bool get_bool(const std::string& key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(key, "expected true or false, got " + std::string(v->type_name()));
    return v->get<bool>();
  }
  std::string get_string(const std::string& key, const std::string& fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_string()) fail(key, "expected a string, got " + std::string(v->type_name()));
    return v->get<std::string>();
  }
  std::optional<int64_t> get_token_id(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer() || v->get<int64_t>() < 0) fail(key, "expected a token id (integer >= 0)");
    return v->get<int64_t>();
  }
  std::vector<int64_t> get_token_ids(const std::string& key) const {
    const json* v = find(key);
    if (!v) return {};
    if (!v->is_array()) {
      auto id = get_token_id(key);
      return {*id};
    }
    std::vector<int64_t> ids;
    for (std::size_t i = 0; i < v->size(); ++i) {
      const json& e = (*v)[i];
      if (!e.is_number_integer() || e.get<int64_t>() < 0)
        fail(key + "[" + std::to_string(i) + "]", "expected a token id (integer >= 0)");
      ids.push_back(e.get<int64_t>());
    }
    return ids;
  }

 private:
  int64_t positive_int(const json& v, const std::string& key) const {
    if (!v.is_number_integer() || v.get<int64_t>() <= 0)
      fail(key, "expected a positive integer, got " + v.dump());
    return v.get<int64_t>();
  }

  const json& root_;
  std::string source_;
};

ModelArchitecture parse_architecture(const Reader& r, const json& root) {
  std::vector<std::string> names;
  for (const auto& a : kArchitectures) names.push_back(a.name);
  std::vector<std::string> types;
  for (const auto& a : kArchitectures) types.push_back(a.model_type);

  std::optional<ModelArchitecture> from_arch;
  if (const json* archs = r.find("architectures")) {
    if (!archs->is_array() || archs->size() != 1 || !(*archs)[0].is_string())
      r.fail("architectures", "expected a list with one architecture name, e.g. [\"Qwen2ForCausalLM\"]");
    const std::string name = (*archs)[0].get<std::string>();
    for (const auto& a : kArchitectures)
      if (name == a.name) from_arch = a.arch;
    if (!from_arch)
      r.fail("architectures", "unsupported architecture '" + name + "'" + did_you_mean(name, names) +
                                  "; supported: " + join(names, ", "));
  }
  const std::string model_type = r.get_string("model_type", "");
  std::optional<ModelArchitecture> from_type;
  if (!model_type.empty()) {
    for (const auto& a : kArchitectures)
      if (model_type == a.model_type) from_type = a.arch;
    if (!from_type && !from_arch)
      r.fail("model_type", "unsupported model_type '" + model_type + "'" + did_you_mean(model_type, types) +
                               "; supported: " + join(types, ", "));
  }
  if (from_arch && from_type && *from_arch != *from_type)
    r.fail("model_type", "'" + model_type + "' does not match architectures [\"" +
                             info_of(*from_arch).name + "\"]");
  if (from_arch) return *from_arch;
  if (from_type) return *from_type;
  (void)root;
  r.fail("architectures", "missing (and no model_type): expected e.g. [\"Qwen2ForCausalLM\"]");
}

// rope_scaling (transformers < 5) or rope_parameters (transformers 5): none/default or llama3.
void parse_rope(const Reader& r, ModelConfig& c) {
  c.rope_theta = r.get_double("rope_theta", 10000.0);
  const char* key = r.find("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const json* rope = r.find(key);
  if (!rope) return;
  if (!rope->is_object()) r.fail(key, "expected an object or null");
  const std::string k = key;
  std::string type;
  if (rope->contains("rope_type") && (*rope)["rope_type"].is_string())
    type = (*rope)["rope_type"].get<std::string>();
  else if (rope->contains("type") && (*rope)["type"].is_string())
    type = (*rope)["type"].get<std::string>();
  else
    type = "default";
  if (rope->contains("rope_theta")) {
    if (!(*rope)["rope_theta"].is_number()) r.fail(k + ".rope_theta", "expected a number");
    c.rope_theta = (*rope)["rope_theta"].get<double>();
  }
  if (rope->contains("partial_rotary_factor") && (*rope)["partial_rotary_factor"].is_number() &&
      (*rope)["partial_rotary_factor"].get<double>() != 1.0)
    r.fail(k + ".partial_rotary_factor", "partial rotary embeddings are not supported (expected 1.0)");
  if (type == "default") return;
  if (type != "llama3")
    r.fail(k + ".rope_type", "RoPE scaling type '" + type +
                                 "' is not supported (supported: default, llama3); refusing to load a model "
                                 "whose positions would be encoded differently from the original");
  auto number = [&](const char* name, double fallback) {
    if (!rope->contains(name)) return fallback;
    const json& v = (*rope)[name];
    if (!v.is_number() || v.get<double>() <= 0) r.fail(k + "." + name, "expected a positive number");
    return v.get<double>();
  };
  Llama3RopeScaling s;
  s.factor = number("factor", s.factor);
  s.low_freq_factor = number("low_freq_factor", s.low_freq_factor);
  s.high_freq_factor = number("high_freq_factor", s.high_freq_factor);
  s.original_max_position_embeddings =
      static_cast<int64_t>(number("original_max_position_embeddings",
                                  static_cast<double>(s.original_max_position_embeddings)));
  if (s.high_freq_factor <= s.low_freq_factor)
    r.fail(k + ".high_freq_factor", "must be greater than low_freq_factor");
  c.rope_scaling = s;
}

}  // namespace

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& a : kArchitectures) n.push_back(a.name);
    return n;
  }();
  return names;
}

const char* architecture_name(ModelArchitecture arch) { return info_of(arch).name; }
const char* architecture_model_type(ModelArchitecture arch) { return info_of(arch).model_type; }

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  if (auto deep = json_nesting_error(json_text)) throw ModelConfigError(source + ": " + *deep);
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw ModelConfigError(source + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) throw ModelConfigError(source + ": expected a JSON object at the top level");
  Reader r(root, source);

  ModelConfig c;
  c.architecture = parse_architecture(r, root);
  c.vocab_size = r.require_int("vocab_size");
  c.hidden_size = r.require_int("hidden_size");
  c.intermediate_size = r.require_int("intermediate_size");
  c.num_hidden_layers = r.require_int("num_hidden_layers");
  c.num_attention_heads = r.require_int("num_attention_heads");
  c.num_key_value_heads = r.get_int("num_key_value_heads", c.num_attention_heads);
  c.max_position_embeddings = r.get_int("max_position_embeddings", 32768);
  c.rms_norm_eps = r.get_double("rms_norm_eps", 1e-6);
  if (c.rms_norm_eps <= 0) r.fail("rms_norm_eps", "expected a positive number");
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", false);

  if (c.num_attention_heads % c.num_key_value_heads != 0)
    r.fail("num_key_value_heads", "num_attention_heads (" + std::to_string(c.num_attention_heads) +
                                      ") must be a multiple of num_key_value_heads (" +
                                      std::to_string(c.num_key_value_heads) + ")");
  if (r.find("head_dim")) {
    c.head_dim = r.get_int("head_dim", 0);
  } else if (c.architecture == ModelArchitecture::Qwen3) {
    c.head_dim = 128;  // Qwen3Config's default, not hidden_size / num_attention_heads
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      r.fail("hidden_size", "not divisible by num_attention_heads and no head_dim given");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) r.fail("head_dim", "rotary embeddings need an even head_dim");

  const std::string act = r.get_string("hidden_act", "silu");
  if (act != "silu") r.fail("hidden_act", "'" + act + "' is not supported (the SwiGLU MLP uses silu)");
  if (r.get_double("attention_dropout", 0.0) != 0.0)
    r.fail("attention_dropout", "dropout is not supported: it would make the policy's log-probs stochastic "
                                "(expected 0.0)");
  // Sliding-window attention changes which keys a query sees; we only implement full attention.
  if (r.get_bool("use_sliding_window", false))
    r.fail("use_sliding_window", "sliding-window attention is not supported (expected false)");
  if (const json* types = r.find("layer_types")) {
    if (!types->is_array()) r.fail("layer_types", "expected a list");
    for (std::size_t i = 0; i < types->size(); ++i)
      if ((*types)[i] != "full_attention")
        r.fail("layer_types[" + std::to_string(i) + "]",
               "only \"full_attention\" layers are supported, got " + (*types)[i].dump());
  }
  parse_rope(r, c);

  switch (c.architecture) {
    case ModelArchitecture::Qwen2:
      c.qkv_bias = true;  // Qwen2Attention: q/k/v with bias, o_proj without, regardless of config
      c.o_proj_bias = false;
      break;
    case ModelArchitecture::Qwen3:
      c.qkv_bias = c.o_proj_bias = r.get_bool("attention_bias", false);
      c.qk_norm = true;
      break;
    case ModelArchitecture::Llama:
      c.qkv_bias = c.o_proj_bias = r.get_bool("attention_bias", false);
      c.mlp_bias = r.get_bool("mlp_bias", false);
      break;
  }
  c.bos_token_id = r.get_token_id("bos_token_id");
  c.eos_token_ids = r.get_token_ids("eos_token_id");
  c.pad_token_id = r.get_token_id("pad_token_id");
  c.torch_dtype = r.get_string("torch_dtype", r.get_string("dtype", "float32"));
  for (int64_t id : c.eos_token_ids)
    if (id >= c.vocab_size) r.fail("eos_token_id", "token id " + std::to_string(id) + " >= vocab_size");
  c.source_json = json_text;
  return c;
}

ModelConfig load_model_config(const std::string& path) { return parse_model_config(read_file(path), path); }

std::string model_config_to_json(const ModelConfig& c, const std::string& dtype_name) {
  json j = json::object();
  if (!c.source_json.empty()) {
    try {
      j = json::parse(c.source_json);
    } catch (const json::parse_error&) {
      j = json::object();
    }
  }
  const ArchInfo& a = info_of(c.architecture);
  j["architectures"] = json::array({a.name});
  j["model_type"] = a.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  if (c.architecture != ModelArchitecture::Qwen2 || c.head_dim != c.hidden_size / c.num_attention_heads)
    j["head_dim"] = c.head_dim;  // always for Qwen3, whose default (128) is not hidden/heads
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (!j.contains("rope_parameters")) {
    j["rope_theta"] = c.rope_theta;
    if (c.rope_scaling) {
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", c.rope_scaling->factor},
                           {"low_freq_factor", c.rope_scaling->low_freq_factor},
                           {"high_freq_factor", c.rope_scaling->high_freq_factor},
                           {"original_max_position_embeddings", c.rope_scaling->original_max_position_embeddings}};
    } else {
      j["rope_scaling"] = nullptr;
    }
  }
  switch (c.architecture) {
    case ModelArchitecture::Qwen2:
      if (!j.contains("use_sliding_window")) j["use_sliding_window"] = false;
      break;
    case ModelArchitecture::Qwen3:
      j["attention_bias"] = c.qkv_bias;
      if (!j.contains("use_sliding_window")) j["use_sliding_window"] = false;
      break;
    case ModelArchitecture::Llama:
      j["attention_bias"] = c.qkv_bias;
      j["mlp_bias"] = c.mlp_bias;
      break;
  }
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  j["torch_dtype"] = dtype_name;
  if (j.contains("dtype")) j["dtype"] = dtype_name;  // transformers 5's name for it, preferred there
  if (!j.contains("attention_dropout")) j["attention_dropout"] = 0.0;
  if (!j.contains("use_cache")) j["use_cache"] = true;
  return j.dump(2) + "\n";
}

}  // namespace grpo::core
