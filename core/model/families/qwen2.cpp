// Qwen2 (Qwen2ForCausalLM; modeling_qwen2.py): Llama with biases on q/k/v (never on o_proj,
// whatever config.json says) and optional sliding windows on layers >= max_window_layers.
#include "core/model/families/family.h"

namespace grpo::core {
namespace {

using json = nlohmann::json;

void read(const ConfigReader& r, ModelConfig& c) {
  c.qkv_bias = true;
  c.o_proj_bias = false;
  read_qwen_sliding_window(r, c);
}

void write(const ModelConfig& c, json& out) {
  write_qwen_sliding_window(c, out);
}

}  // namespace

extern const ModelFamily kQwen2Family{ModelArchitecture::Qwen2, "Qwen2ForCausalLM", "Qwen2ForSequenceClassification",
                                      "qwen2", 0, read, write};

}  // namespace grpo::core
