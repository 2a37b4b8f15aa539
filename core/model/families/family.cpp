#include "core/model/families/family.h"

namespace grpo::core {

using json = nlohmann::json;

// ---- ConfigReader ---------------------------------------------------------------------------

void ConfigReader::fail(const std::string& key, const std::string& what) const {
  throw ModelConfigError(source_ + ": " + key + ": " + what);
}

const json* ConfigReader::find(const std::string& key) const {
  auto it = root_.find(key);
  if (it == root_.end() || it->is_null()) return nullptr;
  return &*it;
}

int64_t ConfigReader::positive_int(const json& v, const std::string& key) const {
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) fail(key, "expected a positive integer, got " + v.dump());
  return v.get<int64_t>();
}

int64_t ConfigReader::require_int(const std::string& key) const {
  const json* v = find(key);
  if (!v) fail(key, "missing (expected a positive integer)");
  return positive_int(*v, key);
}

int64_t ConfigReader::get_int(const std::string& key, int64_t fallback) const {
  const json* v = find(key);
  return v ? positive_int(*v, key) : fallback;
}

double ConfigReader::get_double(const std::string& key, double fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_number()) fail(key, "expected a number, got " + std::string(v->type_name()));
  return v->get<double>();
}

double ConfigReader::require_positive(const std::string& key) const {
  const json* v = find(key);
  if (!v) fail(key, "missing (expected a positive number)");
  if (!v->is_number() || v->get<double>() <= 0) fail(key, "expected a positive number, got " + v->dump());
  return v->get<double>();
}

bool ConfigReader::get_bool(const std::string& key, bool fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(key, "expected true or false, got " + std::string(v->type_name()));
  return v->get<bool>();
}

std::string ConfigReader::get_string(const std::string& key, const std::string& fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_string()) fail(key, "expected a string, got " + std::string(v->type_name()));
  return v->get<std::string>();
}

std::optional<int64_t> ConfigReader::get_token_id(const std::string& key) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer() || v->get<int64_t>() < 0) fail(key, "expected a token id (integer >= 0)");
  return v->get<int64_t>();
}

std::vector<int64_t> ConfigReader::get_token_ids(const std::string& key) const {
  const json* v = find(key);
  if (!v) return {};
  if (!v->is_array()) return {*get_token_id(key)};
  std::vector<int64_t> ids;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    if (!e.is_number_integer() || e.get<int64_t>() < 0)
      fail(key + "[" + std::to_string(i) + "]", "expected a token id (integer >= 0)");
    ids.push_back(e.get<int64_t>());
  }
  return ids;
}

std::vector<int64_t> ConfigReader::get_index_list(const std::string& key, int64_t bound) const {
  const json* v = find(key);
  if (!v) return {};
  if (!v->is_array()) fail(key, "expected a list of layer indices");
  std::vector<int64_t> out;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= bound)
      fail(key + "[" + std::to_string(i) + "]", "expected an integer in [0, " + std::to_string(bound) + ")");
    out.push_back(e.get<int64_t>());
  }
  return out;
}

// ---- shared pieces --------------------------------------------------------------------------

void read_sliding_layers(const ConfigReader& r, ModelConfig& c, const std::function<bool(int64_t)>& fallback,
                         int64_t default_window) {
  c.sliding_layers.assign(static_cast<std::size_t>(c.num_hidden_layers), false);
  if (const json* types = r.find("layer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != c.num_hidden_layers)
      r.fail("layer_types", "expected a list of " + std::to_string(c.num_hidden_layers) +
                                " entries (one per layer), each \"full_attention\" or \"sliding_attention\"");
    for (std::size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      if (t == "sliding_attention") c.sliding_layers[i] = true;
      else if (t != "full_attention")
        r.fail("layer_types[" + std::to_string(i) + "]",
               "expected \"full_attention\" or \"sliding_attention\", got " + t.dump());
    }
  } else {
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) c.sliding_layers[static_cast<std::size_t>(i)] = fallback(i);
  }
  bool any = false;
  for (bool s : c.sliding_layers) any = any || s;
  if (!any) return;
  if (!r.find("sliding_window")) {
    if (default_window > 0 && !r.has("sliding_window")) {
      c.sliding_window = default_window;
      return;
    }
    r.fail("sliding_window", "missing: layers use sliding-window attention, so the window size is needed");
  }
  c.sliding_window = r.require_int("sliding_window");
}

void write_sliding_layers(const ModelConfig& c, json& out) {
  set_default(out, "sliding_window", c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr));
  json types = json::array();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) types.push_back(c.is_sliding(i) ? "sliding_attention" : "full_attention");
  set_default(out, "layer_types", types);
}

void refuse_sliding_window(const ConfigReader& r, const char* family, bool unsupported_here) {
  if (r.get_bool("use_sliding_window", false))
    r.fail("use_sliding_window", unsupported_here ? std::string("sliding windows of ") + family +
                                                        " are not implemented (no released checkpoint uses them; expected false)"
                                                  : std::string(family) + " has no sliding-window attention in transformers (expected false)");
  if (const json* types = r.find("layer_types"))
    if (types->is_array())
      for (std::size_t i = 0; i < types->size(); ++i)
        if ((*types)[i] != "full_attention")
          r.fail("layer_types[" + std::to_string(i) + "]",
                 std::string(family) + " layers are \"full_attention\", got " + (*types)[i].dump());
}

void read_qwen_sliding_window(const ConfigReader& r, ModelConfig& c) {
  // transformers' Qwen2Config: sliding_window = sliding_window if use_sliding_window else None;
  // layer i slides when a window is set and i >= max_window_layers.
  if (!r.get_bool("use_sliding_window", false) && !r.find("layer_types")) {
    c.sliding_layers.clear();
    c.sliding_window = 0;
    return;
  }
  const bool use = r.get_bool("use_sliding_window", false);
  int64_t max_window_layers = 28;  // Qwen2Config's default
  if (const json* v = r.find("max_window_layers")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0) r.fail("max_window_layers", "expected an integer >= 0");
    max_window_layers = v->get<int64_t>();
  }
  read_sliding_layers(r, c, [&](int64_t layer) { return use && layer >= max_window_layers; });
}

void write_qwen_sliding_window(const ModelConfig& c, json& out) {
  set_default(out, "use_sliding_window", c.sliding_window > 0);
  set_default(out, "sliding_window", c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr));
  int64_t first_sliding = c.num_hidden_layers;
  for (int64_t i = c.num_hidden_layers - 1; i >= 0; --i)
    if (c.is_sliding(i)) first_sliding = i;
  set_default(out, "max_window_layers", first_sliding);
}

void read_qwen_moe(const ConfigReader& r, ModelConfig& c) {
  // transformers 5 saves Qwen3MoeConfig's expert count as num_local_experts (its attribute_map
  // name), transformers 4 and Qwen2MoeConfig as num_experts.
  if (r.has("num_local_experts") && !r.has("num_experts")) {
    c.num_experts = r.require_int("num_local_experts");
  } else {
    c.num_experts = r.require_int("num_experts");
    const int64_t local = r.has("num_local_experts") ? r.require_int("num_local_experts") : c.num_experts;
    if (local != c.num_experts)
      r.fail("num_local_experts", "is " + std::to_string(local) + ", but num_experts is " +
                                      std::to_string(c.num_experts) + " (one expert count)");
  }
  c.num_experts_per_tok = r.require_int("num_experts_per_tok");
  if (c.num_experts_per_tok > c.num_experts)
    r.fail("num_experts_per_tok", "is " + std::to_string(c.num_experts_per_tok) + ", more than num_experts (" +
                                      std::to_string(c.num_experts) + ")");
  c.moe_intermediate_size = r.require_int("moe_intermediate_size");
  c.norm_topk_prob = r.get_bool("norm_topk_prob", false);
  c.router_aux_loss_coef = r.get_double("router_aux_loss_coef", 0.001);
  const int64_t step = r.get_int("decoder_sparse_step", 1);
  const std::vector<int64_t> dense = r.get_index_list("mlp_only_layers", c.num_hidden_layers);
  // transformers' Qwen2MoeDecoderLayer: sparse when not in mlp_only_layers, num_experts > 0 and
  // (layer + 1) % decoder_sparse_step == 0.
  c.moe_layers.assign(static_cast<std::size_t>(c.num_hidden_layers), false);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    bool is_dense = (i + 1) % step != 0;
    for (int64_t d : dense) is_dense = is_dense || d == i;
    c.moe_layers[static_cast<std::size_t>(i)] = !is_dense;
  }
}

void write_qwen_moe(const ModelConfig& c, json& out) {
  set_default(out, "num_experts", c.num_experts);
  set_default(out, "num_experts_per_tok", c.num_experts_per_tok);
  set_default(out, "moe_intermediate_size", c.moe_intermediate_size);
  set_default(out, "norm_topk_prob", c.norm_topk_prob);
  set_default(out, "router_aux_loss_coef", c.router_aux_loss_coef);
  json dense = json::array();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    if (!c.is_moe(i)) dense.push_back(i);
  set_default(out, "mlp_only_layers", dense);
  set_default(out, "decoder_sparse_step", 1);
}

}  // namespace grpo::core
