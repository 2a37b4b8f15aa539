// Qwen3-MoE (Qwen3MoeForCausalLM; modeling_qwen3_moe.py): Qwen3's attention (per-head q/k norm)
// over sparse blocks of top-k routed experts, no shared expert.
#include "core/model/families/family.h"

namespace grpo::core {
namespace {

using json = nlohmann::json;

void read(const ConfigReader& r, ModelConfig& c) {
  c.qkv_bias = c.o_proj_bias = r.get_bool("attention_bias", false);
  c.qk_norm = QkNorm::kPerHead;
  refuse_sliding_window(r, "Qwen3-MoE", /*unsupported_here=*/true);  // no released checkpoint slides
  read_qwen_moe(r, c);
}

void write(const ModelConfig& c, json& out) {
  set_default(out, "attention_bias", c.qkv_bias);
  write_qwen_moe(c, out);
  set_default(out, "use_sliding_window", false);
}

}  // namespace

extern const ModelFamily kQwen3MoeFamily{ModelArchitecture::Qwen3Moe, "Qwen3MoeForCausalLM",
                                         "Qwen3MoeForSequenceClassification", "qwen3_moe", 0, read, write};

}  // namespace grpo::core
