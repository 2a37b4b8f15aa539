// Phi-3 (Phi3ForCausalLM; modeling_phi3.py): Llama with fused projections, qkv_proj = [q; k; v]
// and gate_up_proj = [gate; up], su/longrope scaling (read with the shared RoPE keys), and
// optional sliding windows in every layer.
#include "core/model/families/family.h"

namespace grpo::core {
namespace {

using json = nlohmann::json;

void read(const ConfigReader& r, ModelConfig& c) {
  c.fused_qkv = true;
  c.fused_gate_up = true;
  for (const char* key : {"resid_pdrop", "embd_pdrop"})
    if (r.get_double(key, 0.0) != 0.0)
      r.fail(key, "dropout is not supported: it would make the policy's log-probs stochastic (expected 0.0)");
  const bool windowed = r.find("sliding_window") != nullptr;
  read_sliding_layers(r, c, [&](int64_t) { return windowed; });
}

void write(const ModelConfig& c, json& out) {
  set_default(out, "sliding_window", c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr));
}

}  // namespace

extern const ModelFamily kPhi3Family{ModelArchitecture::Phi3, "Phi3ForCausalLM", "Phi3ForSequenceClassification",
                                     "phi3", 0, read, write};

}  // namespace grpo::core
