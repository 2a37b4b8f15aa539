// Gemma 3, text only (Gemma3ForCausalLM, model_type gemma3_text; modeling_gemma3.py): the Gemma
// blocks (gemma_common.h) with a (1 + w) RMSNorm on each head's q and k, no soft-capping by
// default, 5 sliding-window layers to 1 global, and two rotaries: the global layers' (rope_theta,
// with rope_scaling) and the sliding layers' (rope_local_base_freq, unscaled).
#include "core/model/families/gemma_common.h"

namespace grpo::core {
namespace {

using json = nlohmann::json;

void read(const ConfigReader& r, ModelConfig& c) {
  read_gemma_blocks(r, c);
  c.qk_norm = QkNorm::kPerHead;
  c.attn_logit_softcapping = read_softcap(r, "attn_logit_softcapping", 0.0);
  c.final_logit_softcapping = read_softcap(r, "final_logit_softcapping", 0.0);
  if (!r.has("rope_theta") && !r.has("rope_parameters")) c.rope_theta = 1000000.0;  // Gemma3TextConfig's default
  if (!c.local_rope) {  // (transformers 5 gives it as rope_parameters.sliding_attention, read already)
    RotaryConfig local;
    local.theta = r.get_double("rope_local_base_freq", 10000.0);
    c.local_rope = local;
  }
  const int64_t pattern = r.get_int("sliding_window_pattern", 6);
  read_sliding_layers(r, c, [&](int64_t layer) { return (layer + 1) % pattern != 0; }, /*Gemma3TextConfig's*/ 4096);
}

void write(const ModelConfig& c, json& out) {
  write_gemma_blocks(c, out);
  set_default(out, "rope_local_base_freq", c.local_rope ? c.local_rope->theta : 10000.0);
}

}  // namespace

extern const ModelFamily kGemma3Family{ModelArchitecture::Gemma3, "Gemma3ForCausalLM",
                                       "Gemma3TextForSequenceClassification", "gemma3_text", 256, read, write};

}  // namespace grpo::core
