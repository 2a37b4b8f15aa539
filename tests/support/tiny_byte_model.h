// The shape of the tiny models the end-to-end tests warm-start in-process over the demo's
// byte-level tokenizer (the digit task, the tool task): Qwen2, hidden 64, 2 layers.
#pragma once

#include <cstdint>

#include "core/model/model_config.h"

namespace grpo::testing {

inline core::ModelConfig tiny_byte_model_config(std::int64_t vocab_size, int eos_id, std::int64_t max_position_embeddings) {
  core::ModelConfig c;
  c.architecture = core::ModelArchitecture::Qwen2;
  c.vocab_size = vocab_size;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = max_position_embeddings;
  c.tie_word_embeddings = true;
  c.qkv_bias = true;
  c.eos_token_ids = {eos_id};
  return c;
}

}  // namespace grpo::testing
