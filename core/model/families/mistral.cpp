// Mistral (MistralForCausalLM; modeling_mistral.py): Llama without biases, with sliding-window
// attention in every layer when config.json sets sliding_window (null: full attention).
#include "core/model/families/family.h"

namespace grpo::core {
namespace {

using json = nlohmann::json;

void read(const ConfigReader& r, ModelConfig& c) {
  const bool windowed = r.find("sliding_window") != nullptr;
  read_sliding_layers(r, c, [&](int64_t) { return windowed; });
}

void write(const ModelConfig& c, json& out) {
  set_default(out, "sliding_window", c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr));
}

}  // namespace

extern const ModelFamily kMistralFamily{ModelArchitecture::Mistral, "MistralForCausalLM",
                                        "MistralForSequenceClassification", "mistral", 0, read, write};

}  // namespace grpo::core
