#include "core/model/model_config.h"

#include <nlohmann/json.hpp>

#include "core/model/families/family.h"
#include "core/util/fs.h"
#include "core/util/json_limits.h"
#include "core/util/strings.h"

namespace grpo::core {

namespace {

using json = nlohmann::json;

using Reader = ConfigReader;

// What config.json's `architectures` / `model_type` name: a family and the head on top of it.
struct Named {
  const ModelFamily* family = nullptr;
  ModelHead head = ModelHead::kCausalLM;
};

std::vector<std::string> architecture_names() {
  std::vector<std::string> names;
  for (const ModelFamily* f : model_families()) names.push_back(f->causal_lm);
  for (const ModelFamily* f : model_families()) names.push_back(f->sequence_classification);
  return names;
}

Named parse_architecture(const Reader& r) {
  const std::vector<std::string>& types = supported_model_types();
  std::optional<Named> from_arch;
  if (const json* archs = r.find("architectures")) {
    if (!archs->is_array() || archs->size() != 1 || !(*archs)[0].is_string())
      r.fail("architectures", "expected a list with one architecture name, e.g. [\"Qwen2ForCausalLM\"]");
    const std::string name = (*archs)[0].get<std::string>();
    for (const ModelFamily* f : model_families()) {
      if (name == f->causal_lm) from_arch = Named{f, ModelHead::kCausalLM};
      if (name == f->sequence_classification) from_arch = Named{f, ModelHead::kSequenceClassification};
    }
    if (!from_arch)
      r.fail("architectures", "unsupported architecture '" + name + "'" + did_you_mean(name, architecture_names()) +
                                  "; supported: " + join(supported_architectures(), ", ") +
                                  " (and their *ForSequenceClassification)");
  }
  const std::string model_type = r.get_string("model_type", "");
  const ModelFamily* from_type = nullptr;
  if (!model_type.empty()) {
    for (const ModelFamily* f : model_families())
      if (model_type == f->model_type) from_type = f;
    if (!from_type && !from_arch)
      r.fail("model_type", "unsupported model_type '" + model_type + "'" + did_you_mean(model_type, types) +
                               "; supported: " + join(types, ", "));
  }
  if (from_arch && from_type && from_arch->family != from_type)
    r.fail("model_type", "'" + model_type + "' does not match architectures [\"" +
                             from_arch->family->architecture(from_arch->head) + "\"]");
  if (from_arch) return *from_arch;
  if (from_type) return Named{from_type, ModelHead::kCausalLM};
  r.fail("architectures", "missing (and no model_type): expected e.g. [\"Qwen2ForCausalLM\"]");
}

RopeType parse_rope_type(const Reader& r, const std::string& key, const std::string& type) {
  if (type == "default") return RopeType::kDefault;
  if (type == "linear") return RopeType::kLinear;
  if (type == "dynamic") return RopeType::kDynamic;
  if (type == "yarn") return RopeType::kYarn;
  if (type == "llama3") return RopeType::kLlama3;
  if (type == "longrope" || type == "su") return RopeType::kLongrope;  // "su": Phi-3's first name for it
  r.fail(key, "RoPE scaling type '" + type +
                  "' is not supported (supported: default, linear, dynamic, yarn, llama3, longrope); refusing to load "
                  "a model whose positions would be encoded differently from the original");
}

void parse_rope_dict(const Reader& r, const std::string& k, const json* rope, const ModelConfig& c, RotaryConfig& out);

// rope_scaling (transformers < 5) or rope_parameters (transformers 5), as modeling_rope_utils reads them.
// transformers 5 may key rope_parameters by layer type (Gemma 3: full_attention, sliding_attention):
// the full-attention entry is the model's rotary, the sliding one the sliding layers' (local_rope).
void parse_rope(const Reader& r, ModelConfig& c) {
  if (r.get_double("partial_rotary_factor", 1.0) != 1.0)
    r.fail("partial_rotary_factor", "partial rotary embeddings are not supported (expected 1.0)");
  const char* key = r.find("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const json* rope = r.find(key);
  RotaryConfig global{r.get_double("rope_theta", 10000.0), {}};
  if (rope && rope->is_object() && (rope->contains("full_attention") || rope->contains("sliding_attention"))) {
    for (const auto& [layer_type, entry] : rope->items()) {
      const std::string k = std::string(key) + "." + layer_type;
      if (layer_type != "full_attention" && layer_type != "sliding_attention")
        r.fail(k, "unknown layer type (expected full_attention or sliding_attention)");
      RotaryConfig rotary{global.theta, {}};
      parse_rope_dict(r, k, &entry, c, rotary);
      if (layer_type == "full_attention") global = rotary;
      else c.local_rope = rotary;
    }
  } else {
    parse_rope_dict(r, key, rope, c, global);
  }
  c.rope_theta = global.theta;
  c.rope_scaling = global.scaling;
}

// One RoPE dict (`k` names it in errors; null = none): its rope_theta and scaling into `out`.
void parse_rope_dict(const Reader& r, const std::string& k, const json* rope, const ModelConfig& c, RotaryConfig& out) {
  if (!rope || rope->is_null()) return;
  if (!rope->is_object()) r.fail(k, "expected an object or null");
  std::string type = "default", type_key = k + ".rope_type";
  for (const char* name : {"rope_type", "type"})
    if (rope->contains(name) && !(*rope)[name].is_string() && !(*rope)[name].is_null())
      r.fail(k + "." + name, "expected a string (a RoPE type name), got " + (*rope)[name].dump());
  if (rope->contains("rope_type") && (*rope)["rope_type"].is_string()) {
    type = (*rope)["rope_type"].get<std::string>();
  } else if (rope->contains("type") && (*rope)["type"].is_string()) {
    type = (*rope)["type"].get<std::string>();
    type_key = k + ".type";
  }
  if (rope->contains("rope_theta")) {
    if (!(*rope)["rope_theta"].is_number()) r.fail(k + ".rope_theta", "expected a number");
    out.theta = (*rope)["rope_theta"].get<double>();
  }
  if (rope->contains("partial_rotary_factor") && (*rope)["partial_rotary_factor"].is_number() &&
      (*rope)["partial_rotary_factor"].get<double>() != 1.0)
    r.fail(k + ".partial_rotary_factor", "partial rotary embeddings are not supported (expected 1.0)");
  RopeScaling s;
  s.type = parse_rope_type(r, type_key, type);
  if (s.type == RopeType::kDefault) return;
  auto has = [&](const char* name) { return rope->contains(name) && !(*rope)[name].is_null(); };
  auto number = [&](const char* name, double fallback) {
    if (!has(name)) return fallback;
    const json& v = (*rope)[name];
    if (!v.is_number() || v.get<double>() <= 0) r.fail(k + "." + name, "expected a positive number");
    return v.get<double>();
  };
  auto required = [&](const char* name) {
    if (!has(name)) r.fail(k + "." + name, "missing: RoPE scaling '" + type + "' needs it");
    return number(name, 0.0);
  };
  auto factors = [&](const char* name) {
    if (!has(name) || !(*rope)[name].is_array())
      r.fail(k + "." + name, "expected a list of " + std::to_string(c.head_dim / 2) + " numbers (head_dim / 2)");
    const json& list = (*rope)[name];
    if (static_cast<int64_t>(list.size()) != c.head_dim / 2)
      r.fail(k + "." + name, "has " + std::to_string(list.size()) + " entries; head_dim " + std::to_string(c.head_dim) +
                                 " needs " + std::to_string(c.head_dim / 2));
    std::vector<double> out;
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_number() || list[i].get<double>() <= 0)
        r.fail(k + "." + name + "[" + std::to_string(i) + "]", "expected a positive number");
      out.push_back(list[i].get<double>());
    }
    return out;
  };
  // Where a scaling needs the pre-extension context: rope_scaling's own key, else (Phi-3) the
  // top-level one, else max_position_embeddings.
  const int64_t top_level_original = r.get_int("original_max_position_embeddings", 0);
  s.original_max_position_embeddings = static_cast<int64_t>(
      number("original_max_position_embeddings",
             static_cast<double>(top_level_original > 0 ? top_level_original : c.max_position_embeddings)));
  if (has("attention_factor")) s.attention_factor = number("attention_factor", 1.0);
  switch (s.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
    case RopeType::kDynamic:
      s.factor = required("factor");
      break;
    case RopeType::kYarn:
      // transformers 5: the explicit factor (4.x replaced it by max_position_embeddings /
      // original_max_position_embeddings when both were given; equal for well-formed configs).
      s.factor = has("factor") ? number("factor", 1.0)
                               : static_cast<double>(c.max_position_embeddings) /
                                     static_cast<double>(s.original_max_position_embeddings);
      s.beta_fast = number("beta_fast", 32.0);
      s.beta_slow = number("beta_slow", 1.0);
      s.mscale = has("mscale") ? number("mscale", 0.0) : 0.0;
      s.mscale_all_dim = has("mscale_all_dim") ? number("mscale_all_dim", 0.0) : 0.0;
      if (has("truncate")) {
        if (!(*rope)["truncate"].is_boolean()) r.fail(k + ".truncate", "expected true or false");
        s.truncate = (*rope)["truncate"].get<bool>();
      }
      break;
    case RopeType::kLlama3:
      s.factor = number("factor", 8.0);
      s.low_freq_factor = number("low_freq_factor", 1.0);
      s.high_freq_factor = number("high_freq_factor", 4.0);
      if (!has("original_max_position_embeddings")) s.original_max_position_embeddings = 8192;
      if (s.high_freq_factor <= s.low_freq_factor) r.fail(k + ".high_freq_factor", "must be greater than low_freq_factor");
      break;
    case RopeType::kLongrope:
      s.short_factor = factors("short_factor");
      s.long_factor = factors("long_factor");
      // transformers' _compute_longrope_parameters: the attention factor follows from how far
      // max_position_embeddings extends the original context (rope_scaling's factor is unused then).
      s.factor = static_cast<double>(c.max_position_embeddings) / static_cast<double>(s.original_max_position_embeddings);
      if (top_level_original <= 0 && has("factor")) s.factor = number("factor", 1.0);
      break;
  }
  out.scaling = s;
}

}  // namespace

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const ModelFamily* f : model_families()) n.push_back(f->causal_lm);
    return n;
  }();
  return names;
}

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const ModelFamily* f : model_families()) n.push_back(f->model_type);
    return n;
  }();
  return names;
}

const char* architecture_name(ModelArchitecture arch) { return family_of(arch).causal_lm; }
const char* architecture_model_type(ModelArchitecture arch) { return family_of(arch).model_type; }

const char* rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::kDefault: return "default";
    case RopeType::kLinear: return "linear";
    case RopeType::kDynamic: return "dynamic";
    case RopeType::kYarn: return "yarn";
    case RopeType::kLlama3: return "llama3";
    case RopeType::kLongrope: return "longrope";
  }
  return "default";
}

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
  const Named named = parse_architecture(r);
  const ModelFamily& family = *named.family;
  c.architecture = family.arch;
  c.head = named.head;
  if (c.head == ModelHead::kSequenceClassification) {
    // PretrainedConfig: num_labels is len(id2label), 2 when the file has neither.
    if (r.find("num_labels")) c.num_labels = r.require_int("num_labels");
    else if (const json* labels = r.find("id2label")) c.num_labels = labels->is_object() ? static_cast<int64_t>(labels->size()) : 0;
    else c.num_labels = 2;
    if (c.num_labels <= 0) r.fail("id2label", "expected an object with one entry per label");
  }
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
  } else if (family.default_head_dim > 0) {
    c.head_dim = family.default_head_dim;  // the config class's default (Qwen3: 128, Gemma: 256), not hidden / heads
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      r.fail("hidden_size", "not divisible by num_attention_heads and no head_dim given");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) r.fail("head_dim", "rotary embeddings need an even head_dim");

  // transformers' ACT2FN names; Gemma's configs call the key hidden_activation.
  const char* act_key = r.find("hidden_activation") ? "hidden_activation" : "hidden_act";
  const std::string act = r.get_string(act_key, "silu");
  if (act == "silu" || act == "swish") c.hidden_act = Activation::kSilu;
  else if (act == "gelu_pytorch_tanh" || act == "gelu_new") c.hidden_act = Activation::kGeluTanh;
  else r.fail(act_key, "'" + act + "' is not supported (supported: silu, gelu_pytorch_tanh)");
  if (r.get_double("attention_dropout", 0.0) != 0.0)
    r.fail("attention_dropout", "dropout is not supported: it would make the policy's log-probs stochastic "
                                "(expected 0.0)");
  parse_rope(r, c);
  family.read(r, c);

  c.bos_token_id = r.get_token_id("bos_token_id");
  c.eos_token_ids = r.get_token_ids("eos_token_id");
  c.pad_token_id = r.get_token_id("pad_token_id");
  c.torch_dtype = r.get_string("torch_dtype", r.get_string("dtype", "float32"));
  for (int64_t id : c.eos_token_ids)
    if (id >= c.vocab_size) r.fail("eos_token_id", "token id " + std::to_string(id) + " >= vocab_size");
  if (c.pad_token_id && *c.pad_token_id >= c.vocab_size)
    r.fail("pad_token_id", "token id " + std::to_string(*c.pad_token_id) + " >= vocab_size");
  c.source_json = json_text;
  return c;
}

ModelConfig load_model_config(const std::string& path) { return parse_model_config(read_file(path), path); }

namespace {

json rope_scaling_json(const RopeScaling& s) {
  json j = {{"rope_type", rope_type_name(s.type)}};
  switch (s.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
    case RopeType::kDynamic:
      j["factor"] = s.factor;
      break;
    case RopeType::kYarn:
      j["factor"] = s.factor;
      j["original_max_position_embeddings"] = s.original_max_position_embeddings;
      j["beta_fast"] = s.beta_fast;
      j["beta_slow"] = s.beta_slow;
      if (s.mscale > 0) j["mscale"] = s.mscale;
      if (s.mscale_all_dim > 0) j["mscale_all_dim"] = s.mscale_all_dim;
      if (!s.truncate) j["truncate"] = false;
      break;
    case RopeType::kLlama3:
      j["factor"] = s.factor;
      j["low_freq_factor"] = s.low_freq_factor;
      j["high_freq_factor"] = s.high_freq_factor;
      j["original_max_position_embeddings"] = s.original_max_position_embeddings;
      break;
    case RopeType::kLongrope:
      j["short_factor"] = s.short_factor;
      j["long_factor"] = s.long_factor;
      j["original_max_position_embeddings"] = s.original_max_position_embeddings;
      break;
  }
  if (s.attention_factor) j["attention_factor"] = *s.attention_factor;
  return j;
}

}  // namespace

std::string model_config_to_json(const ModelConfig& c, const std::string& dtype_name) {
  json j = json::object();
  if (!c.source_json.empty()) {
    try {
      j = json::parse(c.source_json);
    } catch (const json::parse_error&) {
      j = json::object();
    }
  }
  const ModelFamily& family = family_of(c.architecture);
  j["architectures"] = json::array({family.architecture(c.head)});
  j["model_type"] = family.model_type;
  if (c.head == ModelHead::kSequenceClassification && !j.contains("id2label")) {
    json labels = json::object();
    for (int64_t i = 0; i < c.num_labels; ++i) labels[std::to_string(i)] = "LABEL_" + std::to_string(i);
    j["id2label"] = labels;
  }
  // A loaded config.json keeps its own keys and spelling (a class default stays implicit, as
  // transformers' to_diff_dict leaves it): nothing read from it changes after loading, so only a
  // config made from scratch gets every key written (and the family's own keys).
  const bool fresh = c.source_json.empty();
  auto put = [&](const char* key, json value) {
    if (fresh || j.contains(key)) j[key] = std::move(value);
  };
  put("vocab_size", c.vocab_size);
  put("hidden_size", c.hidden_size);
  put("intermediate_size", c.intermediate_size);
  put("num_hidden_layers", c.num_hidden_layers);
  put("num_attention_heads", c.num_attention_heads);
  put("num_key_value_heads", c.num_key_value_heads);
  if (family.default_head_dim > 0 || c.head_dim != c.hidden_size / c.num_attention_heads)
    put("head_dim", c.head_dim);  // where the class's default (Qwen3: 128) is not hidden/heads
  put("max_position_embeddings", c.max_position_embeddings);
  put("rms_norm_eps", c.rms_norm_eps);
  if (!j.contains("hidden_activation")) put("hidden_act", c.hidden_act == Activation::kGeluTanh ? "gelu_pytorch_tanh" : "silu");
  put("tie_word_embeddings", c.tie_word_embeddings);
  if (fresh) {  // (a loaded one keeps its spelling: rope_parameters, "type": "su", ...)
    j["rope_theta"] = c.rope_theta;
    j["rope_scaling"] = c.rope_scaling.type == RopeType::kDefault ? json(nullptr) : rope_scaling_json(c.rope_scaling);
    family.write(c, j);
    j["attention_dropout"] = 0.0;
    j["use_cache"] = true;
  }
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  j["torch_dtype"] = dtype_name;
  if (j.contains("dtype")) j["dtype"] = dtype_name;  // transformers 5's name for it, preferred there
  return j.dump(2) + "\n";
}

}  // namespace grpo::core
