#include <stdexcept>

#include "core/model/families/family.h"

namespace grpo::core {

// One per file in this folder.
extern const ModelFamily kQwen2Family, kQwen3Family, kLlamaFamily, kMistralFamily, kGemma2Family, kGemma3Family,
    kPhi3Family, kOlmo2Family, kQwen2MoeFamily, kQwen3MoeFamily;

const std::vector<const ModelFamily*>& model_families() {
  static const std::vector<const ModelFamily*> all = {&kQwen2Family,  &kQwen3Family,  &kLlamaFamily,   &kMistralFamily,
                                                      &kGemma2Family, &kGemma3Family, &kPhi3Family,    &kOlmo2Family,
                                                      &kQwen2MoeFamily, &kQwen3MoeFamily};
  return all;
}

const ModelFamily& family_of(ModelArchitecture arch) {
  for (const ModelFamily* f : model_families())
    if (f->arch == arch) return *f;
  throw std::logic_error("no model family for this ModelArchitecture");
}

}  // namespace grpo::core
