// Gemma 2 (Gemma2ForCausalLM; modeling_gemma2.py): the Gemma blocks (gemma_common.h) with
// soft-capped attention scores and logits, and sliding windows on every other layer, from layer 0.
#include "core/model/families/gemma_common.h"

namespace grpo::core {
namespace {

using json = nlohmann::json;

void read(const ConfigReader& r, ModelConfig& c) {
  read_gemma_blocks(r, c);
  c.attn_logit_softcapping = read_softcap(r, "attn_logit_softcapping", 50.0);
  c.final_logit_softcapping = read_softcap(r, "final_logit_softcapping", 30.0);
  read_sliding_layers(r, c, [](int64_t layer) { return (layer + 1) % 2 != 0; }, /*Gemma2Config's default*/ 4096);
}

void write(const ModelConfig& c, json& out) { write_gemma_blocks(c, out); }

}  // namespace

extern const ModelFamily kGemma2Family{ModelArchitecture::Gemma2, "Gemma2ForCausalLM",
                                       "Gemma2ForSequenceClassification", "gemma2", 256, read, write};

}  // namespace grpo::core
