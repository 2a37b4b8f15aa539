// Qwen3 (Qwen3ForCausalLM; modeling_qwen3.py): Qwen2 without the q/k/v biases (attention_bias
// instead) and with a per-head RMSNorm on q and k before rotary; head_dim defaults to 128.
#include "core/model/families/family.h"

namespace grpo::core {
namespace {

using json = nlohmann::json;

void read(const ConfigReader& r, ModelConfig& c) {
  c.qkv_bias = c.o_proj_bias = r.get_bool("attention_bias", false);
  c.qk_norm = QkNorm::kPerHead;
  read_qwen_sliding_window(r, c);
}

void write(const ModelConfig& c, json& out) {
  set_default(out, "attention_bias", c.qkv_bias);
  write_qwen_sliding_window(c, out);
}

}  // namespace

extern const ModelFamily kQwen3Family{ModelArchitecture::Qwen3, "Qwen3ForCausalLM", "Qwen3ForSequenceClassification",
                                      "qwen3", 128, read, write};

}  // namespace grpo::core
