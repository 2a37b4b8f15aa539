#include "core/model/lora.h"

#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>

#include "core/util/fs.h"
#include "core/util/json_limits.h"
#include "core/util/strings.h"

namespace grpo::core {

namespace fs = std::filesystem;

namespace {

// PEFT's INCLUDE_LINEAR_LAYERS_SHORTHAND.
constexpr const char* kAllLinear = "all-linear";
// PEFT's saved keys: "base_model.model." + the module's name in the *ForCausalLM + ".lora_A.weight".
constexpr const char* kPeftPrefix = "base_model.model.";

std::string short_name(const std::string& module) {
  const auto dot = module.rfind('.');
  return dot == std::string::npos ? module : module.substr(dot + 1);
}

// PEFT's check_target_module_exists for a list: the module's name is the entry, or ends with "." + entry.
bool matches(const std::string& module, const std::string& entry) {
  return module == entry || ends_with(module, "." + entry);
}

std::string peft_name(const std::string& module, const char* which) { return kPeftPrefix + module + "." + which + ".weight"; }

}  // namespace

std::vector<std::string> short_module_names(const std::vector<LoraTarget>& modules) {
  std::vector<std::string> names;
  for (const auto& m : modules) {
    const std::string s = short_name(m.module);
    if (std::find(names.begin(), names.end(), s) == names.end()) names.push_back(s);
  }
  return names;
}

double LoraSettings::scaling() const {
  if (r <= 0) return 0.0;
  return use_rslora ? lora_alpha / std::sqrt(static_cast<double>(r)) : lora_alpha / static_cast<double>(r);
}

std::vector<LoraTarget> linear_modules(const ModelConfig& c) {
  // The decoder's projections as core/model/transformer.cpp builds them for this config, under
  // their Hugging Face module names (PEFT matches target_modules against these).
  std::vector<LoraTarget> out;
  const std::int64_t q_out = c.num_attention_heads * c.head_dim, kv_out = c.num_key_value_heads * c.head_dim;
  auto mlp = [&](const std::string& prefix, std::int64_t intermediate) {
    if (c.fused_gate_up) {
      out.push_back({prefix + "gate_up_proj", c.hidden_size, 2 * intermediate});
    } else {
      out.push_back({prefix + "gate_proj", c.hidden_size, intermediate});
      out.push_back({prefix + "up_proj", c.hidden_size, intermediate});
    }
    out.push_back({prefix + "down_proj", intermediate, c.hidden_size});
  };
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string attn = "model.layers." + std::to_string(i) + ".self_attn.";
    const std::string ffn = "model.layers." + std::to_string(i) + ".mlp.";
    if (c.fused_qkv) {
      out.push_back({attn + "qkv_proj", c.hidden_size, q_out + 2 * kv_out});
    } else {
      out.push_back({attn + "q_proj", c.hidden_size, q_out});
      out.push_back({attn + "k_proj", c.hidden_size, kv_out});
      out.push_back({attn + "v_proj", c.hidden_size, kv_out});
    }
    out.push_back({attn + "o_proj", q_out, c.hidden_size});
    if (!c.is_moe(i)) {
      mlp(ffn, c.intermediate_size);
      continue;
    }
    out.push_back({ffn + "gate", c.hidden_size, c.num_experts});
    for (std::int64_t e = 0; e < c.num_experts; ++e) mlp(ffn + "experts." + std::to_string(e) + ".", c.moe_intermediate_size);
    if (c.shared_expert_intermediate_size > 0) {
      mlp(ffn + "shared_expert.", c.shared_expert_intermediate_size);
      out.push_back({ffn + "shared_expert_gate", c.hidden_size, 1});
    }
  }
  return out;
}

std::vector<LoraTarget> select_lora_targets(const ModelConfig& config, const LoraSettings& s) {
  const std::vector<LoraTarget> modules = linear_modules(config);
  const std::string arch = architecture_name(config.architecture);
  std::vector<std::string> entries = s.target_modules;
  const bool all_linear = entries.size() == 1 && entries[0] == kAllLinear;
  // PEFT's defaults (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING): phi3's fused qkv_proj,
  // q_proj and v_proj for the other families.
  if (entries.empty()) entries = config.fused_qkv ? std::vector<std::string>{"qkv_proj"} : std::vector<std::string>{"q_proj", "v_proj"};
  std::vector<bool> chosen(modules.size(), false);
  for (const std::string& entry : entries) {
    if (entry == kAllLinear && !all_linear)
      throw std::invalid_argument("\"all-linear\" stands alone: give it as the whole target_modules, not one entry of a list");
    if (entry.empty()) throw std::invalid_argument("an empty module name");
    bool found = false;
    for (std::size_t i = 0; i < modules.size(); ++i) {
      if (all_linear || !matches(modules[i].module, entry)) continue;
      chosen[i] = true;
      found = true;
    }
    if (found || all_linear) continue;
    if (matches("lm_head", entry))
      throw std::invalid_argument(
          "'" + entry + "': " +
          (config.tie_word_embeddings ? "this " + arch + " model ties lm_head to the input embeddings (tie_word_embeddings)"
                                      : std::string("the LM head's log-probs are computed from its weight in chunks, not "
                                                    "through a projection an adapter could hook")) +
          ", so grpo-cpp does not adapt lm_head; the linear modules LoRA can target are " +
          join(short_module_names(modules), ", "));
    throw std::invalid_argument("'" + entry + "' is not a linear module of this " + arch +
                                " model; its linear modules are " + join(short_module_names(modules), ", ") +
                                " (or all-linear)" + did_you_mean(entry, short_module_names(modules)));
  }
  std::vector<LoraTarget> out;  // (all-linear: PEFT leaves the output layer out too)
  for (std::size_t i = 0; i < modules.size(); ++i)
    if (all_linear || chosen[i]) out.push_back(modules[i]);
  if (out.empty()) throw std::invalid_argument("no module of this " + arch + " model is selected");
  return out;
}

PeftAdapterConfig read_peft_adapter_config(const std::string& adapter_dir) {
  const std::string path = (fs::path(adapter_dir) / kAdapterConfigFile).string();
  auto fail = [&](const std::string& what) -> void { throw std::runtime_error(path + ": " + what); };
  if (!fs::is_directory(adapter_dir)) throw std::runtime_error(adapter_dir + ": not a folder (expected a PEFT adapter folder)");
  if (!fs::exists(path)) fail("missing (a PEFT adapter folder has adapter_config.json and adapter_model.safetensors)");
  nlohmann::json j;
  try {
    const std::string text = read_file(path);
    if (auto error = json_nesting_error(text)) fail(*error);
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail("expected a JSON object");
  PeftAdapterConfig out;
  LoraSettings& s = out.settings;
  if (j.contains("peft_type") && !j["peft_type"].is_string()) fail("peft_type: expected \"LORA\", got " + j["peft_type"].dump());
  const std::string peft_type = j.value("peft_type", std::string());
  if (peft_type != "LORA") fail("peft_type is \"" + peft_type + "\"; only LORA adapters are supported");
  // Each key's type checked by name: nlohmann's own type_error does not say which key it was.
  auto typed = [&](const char* key, bool ok, const char* expected) {
    if (!ok) fail(std::string(key) + ": expected " + expected + ", got " + j[key].dump());
  };
  if (!j.contains("r")) fail("r: missing (the adapters' rank, an integer >= 1)");
  // 8.0 is an integer too (a config written by another tool); 8.5 is not.
  const nlohmann::json& r = j["r"];
  const bool whole = r.is_number_float() && std::trunc(r.get<double>()) == r.get<double>() && std::abs(r.get<double>()) < 1e15;
  typed("r", r.is_number_integer() || whole, "an integer >= 1 (the adapters' rank)");
  s.r = whole ? static_cast<std::int64_t>(r.get<double>()) : r.get<std::int64_t>();
  if (j.contains("lora_alpha")) {
    typed("lora_alpha", j["lora_alpha"].is_number(), "a number");
    s.lora_alpha = j["lora_alpha"].get<double>();
  }
  if (j.contains("lora_dropout")) {
    typed("lora_dropout", j["lora_dropout"].is_number(), "a number in [0, 1)");
    s.lora_dropout = j["lora_dropout"].get<double>();
  }
  if (j.contains("use_rslora")) {
    typed("use_rslora", j["use_rslora"].is_boolean(), "true or false");
    s.use_rslora = j["use_rslora"].get<bool>();
  }
  if (j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string())
    out.base_model_name_or_path = j["base_model_name_or_path"].get<std::string>();
  if (!j.contains("target_modules")) fail("target_modules: missing (a list of module names or \"all-linear\")");
  const auto& t = j["target_modules"];
  const bool names = t.is_array() && std::all_of(t.begin(), t.end(), [](const nlohmann::json& e) { return e.is_string(); });
  typed("target_modules", t.is_string() || names, "a list of module names or \"all-linear\"");
  if (t.is_string()) {
    if (t.get<std::string>() != kAllLinear)
      fail("target_modules is the regular expression \"" + t.get<std::string>() +
           "\"; only a list of module names or \"all-linear\" is supported");
    s.target_modules = {kAllLinear};
  } else {
    s.target_modules = t.get<std::vector<std::string>>();
    std::sort(s.target_modules.begin(), s.target_modules.end());
  }
  if (j.contains("init_lora_weights") && j["init_lora_weights"].is_string() && j["init_lora_weights"] == "gaussian")
    s.init = LoraInit::kGaussian;
  if (s.r < 1) fail("r is " + std::to_string(s.r) + "; a LoRA rank is >= 1");
  // Features that change the adapter's math or its tensors: refused rather than misread.
  auto refuse_if = [&](bool present, const std::string& what) {
    if (present) fail(what + " is not supported by grpo-cpp's LoRA (docs/lora.md)");
  };
  auto non_empty = [&](const char* key) {
    return j.contains(key) && !j[key].is_null() && !(j[key].is_object() && j[key].empty()) &&
           !(j[key].is_array() && j[key].empty()) && !(j[key].is_boolean() && !j[key].get<bool>());
  };
  refuse_if(non_empty("use_dora"), "use_dora (DoRA)");
  refuse_if(j.contains("bias") && j["bias"].is_string() && j["bias"] != "none", "bias \"" + j.value("bias", std::string()) + "\"");
  refuse_if(non_empty("lora_bias"), "lora_bias");
  refuse_if(non_empty("fan_in_fan_out"), "fan_in_fan_out");
  refuse_if(non_empty("use_qalora"), "use_qalora");
  refuse_if(non_empty("use_bdlora"), "use_bdlora");
  // PiSSA, OLoRA, LoftQ, EVA, CorDA initializations change the base weights too: such an adapter
  // only fits its base after PEFT's conversion (which saves init_lora_weights: true).
  if (j.contains("init_lora_weights") && j["init_lora_weights"].is_string() && j["init_lora_weights"] != "gaussian")
    fail("init_lora_weights \"" + j["init_lora_weights"].get<std::string>() +
         "\" changes the base weights as well; convert the adapter with PEFT's "
         "path_initial_model_for_weight_conversion first");
  refuse_if(non_empty("rank_pattern"), "rank_pattern");
  refuse_if(non_empty("alpha_pattern"), "alpha_pattern");
  refuse_if(non_empty("modules_to_save"), "modules_to_save");
  refuse_if(non_empty("layers_to_transform"), "layers_to_transform");
  refuse_if(non_empty("layer_replication"), "layer_replication");
  refuse_if(non_empty("trainable_token_indices"), "trainable_token_indices");
  refuse_if(non_empty("exclude_modules"), "exclude_modules");
  refuse_if(non_empty("target_parameters"), "target_parameters");
  return out;
}

torch::Tensor LoraAdapter::apply(const torch::Tensor& x, torch::Tensor base, bool training) const {
  // PEFT casts the input to the adapter's dtype (float32 over a bf16 base) and the sum back.
  torch::Tensor in = x.scalar_type() == lora_A.scalar_type() ? x : x.to(lora_A.scalar_type());
  if (dropout > 0.0 && training && torch::GradMode::is_enabled()) {
    if (in.is_cpu() && dropout_generator) {
      // torch::dropout's scaling, with the adapters' own generator.
      const torch::Tensor keep = torch::empty_like(in).bernoulli_(1.0 - dropout, *dropout_generator);
      in = in * keep.div_(1.0 - dropout);
    } else {
      in = torch::dropout(in, dropout, /*train=*/true);  // the device's own generator: not checkpointed (docs/lora.md)
    }
  }
  // B (A x) * scaling with the scale applied to the [.., r] intermediate: r columns, not out.
  const torch::Tensor delta = torch::nn::functional::linear(torch::nn::functional::linear(in, lora_A).mul(scaling), lora_B);
  // In place: a projection's output is not saved by its own backward, and a second tensor of
  // [tokens, out] per projection is what LoRA's memory saving would otherwise give back.
  return base.add_(delta.scalar_type() == base.scalar_type() ? delta : delta.to(base.scalar_type()));
}

LoraAdapters::LoraAdapters(CausalLM model, LoraSettings settings, std::uint64_t seed)
    : model_(std::move(model)),
      settings_(std::move(settings)),
      enabled_(std::make_shared<std::atomic<bool>>(true)),
      // Another stream than A's initialization (which draws from `seed` itself).
      dropout_generator_(std::make_shared<at::Generator>(at::detail::createCPUGenerator(seed ^ 0x9E3779B97F4A7C15ULL))) {
  if (settings_.r < 1) throw std::invalid_argument("LoRA rank r is " + std::to_string(settings_.r) + "; expected >= 1");
  targets_ = select_lora_targets(model_->config(), settings_);
  std::map<std::string, Projection> projections;
  for (const auto& item : model_->named_modules("", /*include_self=*/false))
    if (auto p = std::dynamic_pointer_cast<ProjectionImpl>(item.value())) projections.emplace(item.key(), Projection(p));
  const torch::Device device = model_->lm_head_weight().device();
  at::Generator gen = at::detail::createCPUGenerator(seed);
  torch::NoGradGuard no_grad;
  for (const LoraTarget& t : targets_)
    if (projections.count(t.module) && projections.at(t.module)->hook())
      throw std::invalid_argument(t.module + " has an adapter attached already (one LoraAdapters per model)");
  for (const LoraTarget& t : targets_) {
    const auto it = projections.find(t.module);
    if (it == projections.end()) throw std::logic_error("LoRA target " + t.module + " is not a projection of the model");
    Projection proj = it->second;
    if (proj->weight.size(0) != t.out_features || proj->weight.size(1) != t.in_features)
      throw std::logic_error("LoRA target " + t.module + ": shape differs from config.json's");
    auto adapter = std::make_shared<LoraAdapter>();
    torch::Tensor a = torch::empty({settings_.r, t.in_features}, torch::kFloat32);
    if (settings_.init == LoraInit::kGaussian) {
      a.normal_(0.0, 1.0 / static_cast<double>(settings_.r), gen);
    } else {
      // nn.init.kaiming_uniform_(a=sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in).
      const double bound = 1.0 / std::sqrt(static_cast<double>(t.in_features));
      a.uniform_(-bound, bound, gen);
    }
    adapter->lora_A = a.to(device).set_requires_grad(true);
    adapter->lora_B = torch::zeros({t.out_features, settings_.r}, torch::dtype(torch::kFloat32).device(device)).set_requires_grad(true);
    adapter->scaling = settings_.scaling();
    adapter->dropout = settings_.lora_dropout;
    adapter->enabled = enabled_;
    adapter->dropout_generator = dropout_generator_;
    proj->set_hook(adapter);
    slots_.push_back({t, proj, std::move(adapter)});
  }
  for (auto& p : model_->parameters()) p.set_requires_grad(false);
}

LoraAdapters::~LoraAdapters() { detach(); }

void LoraAdapters::detach() {
  if (slots_.empty()) return;
  for (auto& slot : slots_) slot.projection->set_hook(nullptr);
  slots_.clear();
  for (auto& p : model_->parameters()) p.set_requires_grad(true);
}

std::vector<std::string> LoraAdapters::target_module_names() const {
  std::set<std::string> names;
  const std::vector<std::string>& given = settings_.target_modules;
  if (given.empty() || (given.size() == 1 && given[0] == kAllLinear)) {
    for (const auto& t : targets_) names.insert(short_name(t.module));  // what PEFT saves for its default and all-linear
  } else {
    names.insert(given.begin(), given.end());  // as configured: "layers.0.self_attn.q_proj" stays that narrow
  }
  return {names.begin(), names.end()};
}

std::vector<torch::Tensor> LoraAdapters::parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& slot : slots_) {
    out.push_back(slot.adapter->lora_A);
    out.push_back(slot.adapter->lora_B);
  }
  return out;
}

std::int64_t LoraAdapters::num_parameters() const {
  std::int64_t n = 0;
  for (const auto& t : parameters()) n += t.numel();
  return n;
}

NamedTensorList LoraAdapters::peft_state() const {
  NamedTensorList out;
  for (const auto& slot : slots_) {
    out.emplace_back(peft_name(slot.target.module, "lora_A"), slot.adapter->lora_A.detach().to(torch::kCPU, torch::kFloat32).contiguous());
    out.emplace_back(peft_name(slot.target.module, "lora_B"), slot.adapter->lora_B.detach().to(torch::kCPU, torch::kFloat32).contiguous());
  }
  return out;
}

void check_peft_tensors(const ModelConfig& config, const LoraSettings& settings, const NamedTensorList& tensors,
                        const std::string& source) {
  const std::string arch = architecture_name(config.architecture);
  std::map<std::string, std::vector<std::int64_t>> wanted;
  const std::vector<LoraTarget> targets = select_lora_targets(config, settings);
  for (const LoraTarget& t : targets) {
    wanted[peft_name(t.module, "lora_A")] = {settings.r, t.in_features};
    wanted[peft_name(t.module, "lora_B")] = {t.out_features, settings.r};
  }
  std::set<std::string> seen;
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : tensors) {
    const auto it = wanted.find(name);
    if (it == wanted.end()) {
      unexpected.push_back(name);
      continue;
    }
    if (!seen.insert(name).second) throw std::runtime_error(source + ": tensor '" + name + "' appears twice");
    if (t.sizes().vec() != it->second)
      throw std::runtime_error(source + ": tensor '" + name + "' has shape " + shape_text(t.sizes().vec()) + " but this " +
                               arch + " model (config.json) with r = " + std::to_string(settings.r) + " needs " +
                               shape_text(it->second) + ": an adapter for another model shape or rank");
    if (!t.is_floating_point()) throw std::runtime_error(source + ": tensor '" + name + "' is not a floating-point tensor");
  }
  if (!unexpected.empty()) {
    std::vector<std::string> head(unexpected.begin(), unexpected.begin() + std::min<std::size_t>(unexpected.size(), 3));
    throw std::runtime_error(source + ": " + std::to_string(unexpected.size()) + " tensor(s) are not LoRA adapters of this " +
                             arch + " model's targets (" + join(short_module_names(targets), ", ") + "), e.g. " +
                             join(head, ", ") + ": an adapter for another architecture or other target_modules");
  }
  std::vector<std::string> missing;
  for (const auto& [name, shape] : wanted)
    if (!seen.count(name)) missing.push_back(name);
  if (!missing.empty())
    throw std::runtime_error(source + ": " + std::to_string(missing.size()) + " adapter tensor(s) of this " + arch +
                             " model are missing, e.g. " + missing.front() + ": an adapter for another model (layer count?)");
}

void LoraAdapters::load_peft_state(const NamedTensorList& tensors, const std::string& source) {
  check_peft_tensors(model_->config(), settings_, tensors, source);  // everything before the first copy
  std::map<std::string, torch::Tensor*> slots;
  for (auto& slot : slots_) {
    slots[peft_name(slot.target.module, "lora_A")] = &slot.adapter->lora_A;
    slots[peft_name(slot.target.module, "lora_B")] = &slot.adapter->lora_B;
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : tensors) slots.at(name)->copy_(t);
}

std::string LoraAdapters::peft_config_json(const std::string& base_model) const {
  // Every key PEFT's LoraConfig.to_dict() writes (peft v0.17.1, src/peft/tuners/lora/config.py
  // and src/peft/config.py), sorted and indented as save_pretrained's json.dumps(indent=2,
  // sort_keys=True), no trailing newline; the features this runtime does not implement hold
  // PEFT's defaults. tests/fixtures/lora/README.md cites the lines.
  nlohmann::ordered_json j;
  std::map<std::string, nlohmann::json> m;
  m["alpha_pattern"] = nlohmann::json::object();
  m["auto_mapping"] = nullptr;
  m["base_model_name_or_path"] = base_model;
  m["bias"] = "none";
  m["corda_config"] = nullptr;
  m["eva_config"] = nullptr;
  m["exclude_modules"] = nullptr;
  m["fan_in_fan_out"] = false;
  m["inference_mode"] = true;
  m["init_lora_weights"] = settings_.init == LoraInit::kGaussian ? nlohmann::json("gaussian") : nlohmann::json(true);
  m["layer_replication"] = nullptr;
  m["layers_pattern"] = nullptr;
  m["layers_to_transform"] = nullptr;
  m["loftq_config"] = nlohmann::json::object();
  m["lora_alpha"] = settings_.lora_alpha == std::floor(settings_.lora_alpha) && std::abs(settings_.lora_alpha) < 1e15
                        ? nlohmann::json(static_cast<std::int64_t>(settings_.lora_alpha))
                        : nlohmann::json(settings_.lora_alpha);
  m["lora_bias"] = false;
  m["lora_dropout"] = settings_.lora_dropout;
  m["megatron_config"] = nullptr;
  m["megatron_core"] = "megatron.core";
  m["modules_to_save"] = nullptr;
  m["peft_type"] = "LORA";
  m["qalora_group_size"] = 16;
  m["r"] = settings_.r;
  m["rank_pattern"] = nlohmann::json::object();
  m["revision"] = nullptr;
  m["target_modules"] = target_module_names();
  m["target_parameters"] = nullptr;
  m["task_type"] = "CAUSAL_LM";
  m["trainable_token_indices"] = nullptr;
  m["use_dora"] = false;
  m["use_qalora"] = false;
  m["use_rslora"] = settings_.use_rslora;
  for (auto& [k, v] : m) j[k] = v;
  return j.dump(2);
}

void LoraAdapters::save_peft_files(const std::string& dir, const std::string& base_model) const {
  save_safetensors((fs::path(dir) / kAdapterWeightsFile).string(), peft_state(), {{"format", "pt"}});
  atomic_write_file((fs::path(dir) / kAdapterConfigFile).string(), peft_config_json(base_model));
}

void LoraAdapters::check_peft_config(const std::string& dir) const {
  const PeftAdapterConfig config = read_peft_adapter_config(dir);
  const std::string config_path = (fs::path(dir) / kAdapterConfigFile).string();
  const LoraSettings& a = config.settings;
  if (a.r != settings_.r)
    throw PeftConfigMismatch("r", std::to_string(a.r), std::to_string(settings_.r),
                             config_path + ": r is " + std::to_string(a.r) + " but these adapters have r = " + std::to_string(settings_.r));
  if (std::abs(a.scaling() - settings_.scaling()) > 1e-12 * std::max(1.0, std::abs(settings_.scaling()))) {
    const std::string theirs = std::to_string(a.lora_alpha) + (a.use_rslora ? " with use_rslora" : "");
    const std::string ours = std::to_string(settings_.lora_alpha) + (settings_.use_rslora ? " with use_rslora" : "");
    throw PeftConfigMismatch("lora_alpha", theirs, ours, config_path + ": lora_alpha " + theirs + " differs from these adapters' " + ours);
  }
  const std::vector<LoraTarget> targets = select_lora_targets(model_->config(), a);
  std::vector<std::string> mine, theirs;
  for (const auto& t : targets_) mine.push_back(t.module);
  for (const auto& t : targets) theirs.push_back(t.module);
  if (mine != theirs)
    throw PeftConfigMismatch("target_modules", join(a.target_modules, ", "), join(target_module_names(), ", "),
                             config_path + ": target_modules " + join(a.target_modules, ", ") + " differ from these adapters' " +
                                 join(target_module_names(), ", "));
}

void LoraAdapters::load_peft_folder(const std::string& dir) {
  check_peft_config(dir);
  const std::string weights = (fs::path(dir) / kAdapterWeightsFile).string();
  if (!fs::exists(weights)) throw std::runtime_error(weights + ": missing");
  NamedTensorList tensors;
  try {
    tensors = load_safetensors(weights);
  } catch (const std::exception& e) {
    throw std::runtime_error(weights + ": " + e.what());
  }
  load_peft_state(tensors, weights);
}

std::vector<std::pair<std::string, torch::Tensor>> LoraAdapters::merged_weights(std::optional<torch::Dtype> dtype) const {
  torch::NoGradGuard no_grad;
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& slot : slots_) {
    const torch::Tensor& w = slot.projection->weight;
    // One fused W + scaling (B A) into a fresh tensor (the engine may still hold the last one).
    const torch::Tensor merged = torch::addmm(w.to(torch::kFloat32), slot.adapter->lora_B, slot.adapter->lora_A,
                                              /*beta=*/1.0, /*alpha=*/slot.adapter->scaling);
    out.emplace_back(slot.target.module + ".weight", merged.to(dtype.value_or(w.scalar_type())));
  }
  return out;
}

void LoraAdapters::merge_into_base() {
  const auto merged = merged_weights();  // in slot order
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < slots_.size(); ++i) slots_[i].projection->weight.copy_(merged[i].second);
  detach();
}

torch::Tensor LoraAdapters::dropout_rng_state() const { return dropout_generator_->get_state(); }

void LoraAdapters::set_dropout_rng_state(const torch::Tensor& state) {
  at::detail::createCPUGenerator().set_state(state);  // a scratch generator first: checks the state's size
  dropout_generator_->set_state(state);
}

AdaptersOff::AdaptersOff(LoraAdapters* adapters) : adapters_(adapters) {
  if (!adapters_) return;
  was_enabled_ = adapters_->enabled();
  adapters_->set_enabled(false);
}

AdaptersOff::~AdaptersOff() {
  if (adapters_) adapters_->set_enabled(was_enabled_);
}

}  // namespace grpo::core
