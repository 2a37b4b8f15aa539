// Qwen2-MoE (Qwen2MoeForCausalLM; modeling_qwen2_moe.py): Qwen2's attention over sparse blocks of
// top-k routed experts (softmax over all experts, then top-k, renormalized when norm_topk_prob)
// plus one always-on shared expert scaled by sigmoid(shared_expert_gate(x)).
#include "core/model/families/family.h"

namespace grpo::core {
namespace {

using json = nlohmann::json;

void read(const ConfigReader& r, ModelConfig& c) {
  c.qkv_bias = r.get_bool("qkv_bias", true);
  c.o_proj_bias = false;
  // transformers 5 slides layers by a rule of its own here, and no released checkpoint uses one.
  refuse_sliding_window(r, "Qwen2-MoE", /*unsupported_here=*/true);
  read_qwen_moe(r, c);
  c.shared_expert_intermediate_size = r.require_int("shared_expert_intermediate_size");
}

void write(const ModelConfig& c, json& out) {
  write_qwen_moe(c, out);
  set_default(out, "shared_expert_intermediate_size", c.shared_expert_intermediate_size);
  set_default(out, "use_sliding_window", false);
}

}  // namespace

extern const ModelFamily kQwen2MoeFamily{ModelArchitecture::Qwen2Moe, "Qwen2MoeForCausalLM",
                                         "Qwen2MoeForSequenceClassification", "qwen2_moe", 0, read, write};

}  // namespace grpo::core
