// Llama (LlamaForCausalLM; transformers' modeling_llama.py): pre-norm blocks, SwiGLU, RoPE
// (default or llama3 scaling), attention and MLP biases as config.json says. Our reference family:
// the others are described by how they differ from it.
#include "core/model/families/family.h"

namespace grpo::core {
namespace {

using json = nlohmann::json;

void read(const ConfigReader& r, ModelConfig& c) {
  c.qkv_bias = c.o_proj_bias = r.get_bool("attention_bias", false);
  c.mlp_bias = r.get_bool("mlp_bias", false);
  refuse_sliding_window(r, "Llama");
}

void write(const ModelConfig& c, json& out) {
  set_default(out, "attention_bias", c.qkv_bias);
  set_default(out, "mlp_bias", c.mlp_bias);
}

}  // namespace

extern const ModelFamily kLlamaFamily{ModelArchitecture::Llama, "LlamaForCausalLM", "LlamaForSequenceClassification",
                                      "llama", 0, read, write};

}  // namespace grpo::core
