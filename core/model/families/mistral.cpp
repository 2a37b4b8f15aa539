// Mistral (MistralForCausalLM; modeling_mistral.py): Llama without biases, with sliding-window
// attention in every layer: sliding_window (MistralConfig's default 4096 when absent; null: full
// attention). MistralConfig has no layer_types (transformers ignores them), so neither do we.
#include "core/model/families/family.h"

namespace grpo::core {
namespace {

using json = nlohmann::json;

void read(const ConfigReader& r, ModelConfig& c) {
  c.sliding_window = r.has("sliding_window") ? (r.find("sliding_window") ? r.require_int("sliding_window") : 0) : 4096;
  c.sliding_layers.assign(static_cast<std::size_t>(c.num_hidden_layers), c.sliding_window > 0);
}

void write(const ModelConfig& c, json& out) {
  set_default(out, "sliding_window", c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr));
}

}  // namespace

extern const ModelFamily kMistralFamily{ModelArchitecture::Mistral, "MistralForCausalLM",
                                        "MistralForSequenceClassification", "mistral", 0, read, write};

}  // namespace grpo::core
