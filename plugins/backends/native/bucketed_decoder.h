// Fixed-shape decode steps for the engine, replayed as CUDA graphs where they can be (vLLM's
// CUDA graph runner, in C++). A step's live rows are padded to the smallest bucket that holds
// them (1, 2, 4, 8, then multiples of 8 up to max_num_seqs) and every row attends over the
// cache's whole capacity (CausalLMImpl::decode_slots_fixed), so a step's shapes depend on the
// bucket alone. On CUDA one graph per bucket, captured on the bucket's first step, then
// replays the step's few hundred kernels (embedding, every layer, the LM head) in one launch:
// the host no longer issues them one by one, which is what bounded decoding at small batch.
// Without graphs (decode_steps: bucketed, the CPU, or a failed capture) the same steps run
// eagerly, so graphs on and off produce the same logits.
//
// Padding rows feed token 0 at position 0 of the free slots [rows, bucket): the engine keeps
// its live rows at [0, rows) and a slot's next sequence overwrites position 0 when it loads,
// so what they write is never read.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/transformer.h"

namespace grpo::native {

// How the engine shapes its decode steps (EngineOptions::decode_steps, the native backend's
// `decode_steps` option).
enum class DecodeSteps {
  kAuto,      // graphs where they can run (CUDA, a model whose step reads nothing back), else dynamic
  kDynamic,   // each step sized to its live rows and their longest sequence (the CPU's default)
  kBucketed,  // the graphs' fixed shapes, run eagerly (their reference; runs on the CPU too)
  kGraphs,    // fixed shapes replayed as CUDA graphs; bucketed (or dynamic) where they cannot, said once
};
const char* decode_steps_name(DecodeSteps steps);  // "auto", "dynamic", "bucketed", "graphs"
std::optional<DecodeSteps> parse_decode_steps(std::string_view name);

// Whether this build can capture CUDA graphs (a CUDA LibTorch, GRPO_HAVE_CUDA).
bool cuda_graphs_compiled();

// What `requested` becomes for `model` on `device`, and why it is not what was asked for
// ("" when it is, or when auto chose).
struct DecodeStepsChoice {
  DecodeSteps steps = DecodeSteps::kDynamic;  // kDynamic, kBucketed or kGraphs
  std::string fallback_reason;
};
DecodeStepsChoice choose_decode_steps(DecodeSteps requested, const core::CausalLMImpl& model, const at::Device& device);

// The smallest bucket holding `rows` decode rows, at most max_rows.
std::int64_t decode_bucket(std::int64_t rows, std::int64_t max_rows);

class BucketedDecoder {
 public:
  // `graphs`: capture and replay CUDA graphs (the model must be on a CUDA device).
  BucketedDecoder(std::int64_t max_rows, bool graphs, const at::Device& device);
  ~BucketedDecoder();
  BucketedDecoder(const BucketedDecoder&) = delete;
  BucketedDecoder& operator=(const BucketedDecoder&) = delete;

  // One step of rows [0, tokens.size()) of `cache`: tokens[r] is row r's input token, at
  // position cache.length(r). Returns the rows' logits [rows, vocab] (the model's logits()).
  // Does not advance the cache's lengths (the caller does, for these rows). With graphs the
  // logits are the graph's output buffer: valid until the next step.
  at::Tensor step(core::CausalLMImpl& model, core::SlotKVCache& cache, const std::vector<std::int64_t>& tokens);

  // Whether steps replay CUDA graphs (false after a capture failed: steps run eagerly).
  bool graphs() const { return graphs_ != nullptr && !graphs_failed_; }
  bool capture_failed() const { return graphs_failed_; }
  std::int64_t graphs_captured() const { return captured_; }
  std::int64_t graph_replays() const { return replays_; }
  std::int64_t padded_rows() const { return padded_rows_; }  // rows computed beyond the live ones

 private:
  struct Graphs;  // the CUDA side (bucketed_decoder.cpp)

  std::int64_t max_rows_;
  at::Device device_;
  std::unique_ptr<Graphs> graphs_;  // null: eager steps
  bool graphs_failed_ = false;
  std::int64_t captured_ = 0, replays_ = 0, padded_rows_ = 0;
};

}  // namespace grpo::native
