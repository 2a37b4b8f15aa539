// OLMo 2 (Olmo2ForCausalLM; modeling_olmo2.py), open-instruct's own family: the norms after
// attention and after the MLP, inside the residual (no norm before them), and one RMSNorm over
// all heads' q (and one over k) before the split into heads.
#include "core/model/families/family.h"

namespace grpo::core {
namespace {

using json = nlohmann::json;

void read(const ConfigReader& r, ModelConfig& c) {
  c.norm_placement = NormPlacement::kPostNorm;
  c.qk_norm = QkNorm::kAllHeads;
  c.rms_norm_kind = RmsNormKind::kScaleThenCast;  // Olmo2RMSNorm: weight * norm(x) in float32, then cast
  c.qkv_bias = c.o_proj_bias = r.get_bool("attention_bias", false);
  refuse_sliding_window(r, "OLMo 2");
}

void write(const ModelConfig& c, json& out) { set_default(out, "attention_bias", c.qkv_bias); }

}  // namespace

extern const ModelFamily kOlmo2Family{ModelArchitecture::Olmo2, "Olmo2ForCausalLM", "Olmo2ForSequenceClassification",
                                      "olmo2", 0, read, write};

}  // namespace grpo::core
