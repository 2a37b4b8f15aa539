// Over 500 lines: the update's stages share SampleRef and MiniBatch, which stay private to this file.
#include "core/train/policy_update.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>

#include "core/dist/parallelism.h"
#include "core/model/host_copy.h"
#include "core/model/logprobs.h"
#include "core/optim/optimizer.h"
#include "core/train/metric_sums.h"
#include "core/train/packing.h"
#include "core/train/pending_metrics.h"
#include "grpo/sdk/torch/masked.h"

namespace grpo::core {

namespace {

// One sample of the step, in group / sample order.
struct SampleRef {
  std::size_t group = 0, sample = 0;
  std::size_t index = 0;  // position in group / sample order
  const Group* g = nullptr;
  const Sample* s = nullptr;
  std::int64_t prompt_len() const { return static_cast<std::int64_t>(g->prompt_ids.size()); }
  std::int64_t response_len() const { return static_cast<std::int64_t>(s->response_ids.size()); }
  bool carries_rollout_logprobs() const { return !s->rollout_logprobs.empty(); }
  std::string name() const { return "group " + std::to_string(group) + " sample " + std::to_string(sample); }
};

std::vector<SampleRef> flatten(const std::vector<Group>& groups) {
  std::vector<SampleRef> out;
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (std::size_t s = 0; s < groups[g].samples.size(); ++s)
      out.push_back({g, s, out.size(), &groups[g], &groups[g].samples[s]});
  return out;
}

void check_fits(const SampleRef& r, std::int64_t pack_length) {
  const std::int64_t len = r.prompt_len() + r.response_len();
  if (len > pack_length)
    throw std::invalid_argument(r.name() + " has " + std::to_string(r.prompt_len()) + " prompt + " +
                                std::to_string(r.response_len()) + " response tokens = " + std::to_string(len) +
                                ", more than train.pack_length " + std::to_string(pack_length));
}

void check_common_options(const UpdateOptions& o) {
  if (o.pack_length < 1) throw std::invalid_argument("update: pack_length must be >= 1, got " + std::to_string(o.pack_length));
  if (o.rows_per_micro_batch < 1)
    throw std::invalid_argument("update: rows_per_micro_batch must be >= 1, got " + std::to_string(o.rows_per_micro_batch));
  if (!(o.temperature > 0.0) || !std::isfinite(o.temperature))
    throw std::invalid_argument("update: temperature must be a finite number > 0, got " + std::to_string(o.temperature));
  if (o.logprob_chunk_tokens < 1)
    throw std::invalid_argument("update: logprob_chunk_tokens must be >= 1, got " + std::to_string(o.logprob_chunk_tokens));
}

LogProbOptions logprob_options(const UpdateOptions& o, bool with_entropy) {
  LogProbOptions lo;
  lo.chunk_tokens = o.logprob_chunk_tokens;
  lo.temperature = o.temperature;
  lo.with_entropy = with_entropy;
  return lo;
}

std::vector<SequenceTokens> sequence_tokens(const std::vector<const SampleRef*>& refs) {
  std::vector<SequenceTokens> out;
  out.reserve(refs.size());
  for (const SampleRef* r : refs) out.push_back({&r->g->prompt_ids, &r->s->response_ids});
  return out;
}

std::int64_t response_width(const std::vector<const SampleRef*>& refs) {
  std::int64_t w = 1;  // never 0 wide: keeps every [S, W] tensor non-degenerate
  for (const SampleRef* r : refs) w = std::max(w, r->response_len());
  return w;
}

// Plans the packing of `refs` (their order is the plan's sequence order) and returns the
// micro-batches as lists of refs.
std::vector<std::vector<const SampleRef*>> pack_refs(const std::vector<const SampleRef*>& refs, const UpdateOptions& o,
                                                     PackingPlan* plan_out = nullptr) {
  std::vector<std::int64_t> lengths;
  lengths.reserve(refs.size());
  for (const SampleRef* r : refs) {
    check_fits(*r, o.pack_length);
    lengths.push_back(r->prompt_len() + r->response_len());
  }
  const PackingPlan plan = plan_packing(lengths, o.pack_length);
  std::vector<std::vector<const SampleRef*>> out;
  for (const auto& mb : micro_batches(plan, o.rows_per_micro_batch)) {
    out.emplace_back();
    for (std::size_t i : mb) out.back().push_back(refs[i]);
  }
  if (plan_out) *plan_out = plan;
  return out;
}

// No-grad response log-probs of `refs`, written to out[ref->index].
void logprobs_into(CausalLM& model, const std::vector<const SampleRef*>& refs, const UpdateOptions& o,
                   std::vector<std::vector<float>>* out) {
  torch::NoGradGuard no_grad;
  const ComputePrecisionScope precision(o.precision, model->lm_head_weight().device());
  for (const auto& mb : pack_refs(refs, o)) {
    const std::int64_t width = response_width(mb);
    // Read back on the host: the rows are std::vector<float>.
    const torch::Tensor lp =
        packed_response_logprobs(model, sequence_tokens(mb), width, logprob_options(o, false)).logprobs.to(torch::kCPU).contiguous();
    const float* data = lp.data_ptr<float>();
    for (std::size_t k = 0; k < mb.size(); ++k) {
      const float* row = data + static_cast<std::int64_t>(k) * width;
      (*out)[mb[k]->index].assign(row, row + mb[k]->response_len());
    }
  }
}

// [S, width] float32 rows from per-sample vectors (padding 0) on `device`; `rows[k]` may be
// null (all 0). Filled on the host through data_ptr, then moved (float32 like the log-probs,
// whatever the model's dtype).
torch::Tensor rows_tensor(const std::vector<const std::vector<float>*>& rows, std::int64_t width, const torch::Device& device) {
  const auto host = torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCPU);
  torch::Tensor t = torch::zeros({static_cast<std::int64_t>(rows.size()), width}, host);
  float* data = t.data_ptr<float>();
  for (std::size_t k = 0; k < rows.size(); ++k)
    if (rows[k]) std::copy(rows[k]->begin(), rows[k]->end(), data + static_cast<std::int64_t>(k) * width);
  return to_device(t, device);
}

// The name a policy-loss metric is reported under: open-instruct's `_avg` suffix.
std::string loss_metric_name(const std::string& name) {
  const std::string suffix = "_avg";
  const bool has = name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  return has ? name : name + suffix;
}

// One mini-batch: its micro-batches (refs of the sequences in the forward) and global scale.
struct MiniBatch {
  std::vector<std::vector<const SampleRef*>> micro;
  std::vector<std::int64_t> widths;
  std::vector<at::Tensor> masks;  // [S_i, width_i] float32, host-built: 1 on response tokens
  AggregationScale scale;
  PackingPlan plan;
};

}  // namespace

std::vector<std::vector<float>> sample_logprobs(CausalLM& model, const std::vector<Group>& groups, const UpdateOptions& options) {
  check_common_options(options);
  if (!model) throw std::invalid_argument("sample_logprobs: no model");
  const std::vector<SampleRef> all = flatten(groups);
  std::vector<const SampleRef*> refs;
  for (const SampleRef& r : all)
    if (r.response_len() > 0) refs.push_back(&r);
  std::vector<std::vector<float>> out(all.size());
  logprobs_into(model, refs, options, &out);
  return out;
}

namespace {

// Every input check of update_policy, before any forward.
void check_update(const CausalLM& policy, const UpdateComponents& components, const UpdateOptions& o,
                  const std::vector<SampleRef>& all) {
  check_common_options(o);
  if (o.num_epochs < 1) throw std::invalid_argument("update: num_epochs must be >= 1, got " + std::to_string(o.num_epochs));
  if (o.num_mini_batches < 1)
    throw std::invalid_argument("update: num_mini_batches must be >= 1, got " + std::to_string(o.num_mini_batches));
  if (!std::isfinite(o.max_grad_norm) || o.max_grad_norm < 0.0)
    throw std::invalid_argument("update: max_grad_norm must be a finite number >= 0, got " + std::to_string(o.max_grad_norm));
  validate(o.kl);
  validate(o.mismatch);
  if (!policy) throw std::invalid_argument("update: no policy model");
  if (!components.policy_loss) throw std::invalid_argument("update: no policy loss component (algorithm.policy_loss)");
  const bool with_reference = needs_reference_model(o.kl);
  if (with_reference && !components.kl_estimator)
    throw std::invalid_argument("update: algorithm.kl_coef = " + std::to_string(o.kl.kl_coef) +
                                " needs a KL estimator (algorithm.kl_estimator)");
  if (with_reference && !components.reference)
    throw std::invalid_argument("update: algorithm.kl_coef = " + std::to_string(o.kl.kl_coef) + " needs a reference model, none was given");
  for (const SampleRef& r : all) {
    check_fits(r, o.pack_length);
    if (r.s->trainable && r.response_len() > 0 && r.s->advantages.size() != r.s->response_ids.size())
      throw std::invalid_argument("update: " + r.name() + " has " + std::to_string(r.s->advantages.size()) + " advantages for " +
                                  std::to_string(r.response_len()) + " response tokens (one per token expected)");
    if (!r.s->policy_mask.empty() && r.s->policy_mask.size() != r.s->response_ids.size())
      throw std::invalid_argument("update: " + r.name() + " has a policy mask of " + std::to_string(r.s->policy_mask.size()) +
                                  " entries for " + std::to_string(r.response_len()) + " response tokens");
    if (r.carries_rollout_logprobs() && r.s->rollout_logprobs.size() != r.s->response_ids.size())
      throw std::invalid_argument("update: " + r.name() + " has " + std::to_string(r.s->rollout_logprobs.size()) +
                                  " rollout log-probs for " + std::to_string(r.response_len()) + " response tokens");
  }
}

// Mini-batches of whole groups over the GLOBAL group list [0, global_groups) (this process
// holds [first_group, first_group + its groups)); only trainable samples with response tokens
// are computed (appended to *trained). Each mini-batch's scale counts its own micro-batches.
std::vector<MiniBatch> plan_mini_batches(const std::vector<SampleRef>& all, std::size_t first_group, std::size_t global_groups,
                                         const UpdateOptions& o, std::vector<const SampleRef*>* trained) {
  const std::size_t n_mini = std::min<std::size_t>(static_cast<std::size_t>(o.num_mini_batches), global_groups);
  std::vector<MiniBatch> minis(n_mini);
  std::size_t next = 0;  // position in `all`
  for (std::size_t k = 0; k < n_mini; ++k) {
    // Global group range [lo, hi): balanced split, the first (groups % n_mini) mini-batches one larger.
    const std::size_t base = global_groups / n_mini, extra = global_groups % n_mini;
    const std::size_t lo = k * base + std::min(k, extra), hi = lo + base + (k < extra ? 1 : 0);
    std::vector<const SampleRef*> refs;
    double untrained_rows = 0.0;
    for (; next < all.size() && first_group + all[next].group < hi; ++next) {
      if (first_group + all[next].group < lo) continue;
      if (all[next].s->trainable && all[next].response_len() > 0)
        refs.push_back(&all[next]);
      else
        untrained_rows += 1.0;
    }
    MiniBatch& mb = minis[k];
    mb.micro = pack_refs(refs, o, &mb.plan);
    for (const auto& micro : mb.micro) {
      mb.widths.push_back(response_width(micro));
      // 1 on every token the policy sampled (every computed sample is trainable), 0 on padding
      // and on tool observations: those enter no loss, KL, entropy or denominator. Host-built
      // (the scale below reads it), moved to the model's device per micro-batch.
      torch::Tensor m = torch::zeros({static_cast<std::int64_t>(micro.size()), mb.widths.back()},
                                     torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCPU));
      for (std::size_t s = 0; s < micro.size(); ++s) {
        const Sample& smp = *micro[s]->s;
        if (smp.policy_mask.empty()) {
          m[static_cast<std::int64_t>(s)].narrow(0, 0, micro[s]->response_len()).fill_(1.0f);
          continue;
        }
        auto row = m.accessor<float, 2>()[static_cast<std::int64_t>(s)];
        for (std::size_t t = 0; t < smp.policy_mask.size(); ++t) row[static_cast<std::int64_t>(t)] = smp.policy_mask[t] ? 1.0f : 0.0f;
      }
      mb.masks.push_back(m);
    }
    // Global denominators: every micro-batch mask of the mini-batch, before any forward.
    mb.scale = aggregation_scale(mb.masks, o.max_response_len);
    // Untrainable samples are mask-0 rows of the batch: only Dr.GRPO's row count sees them.
    mb.scale.global_rows += untrained_rows;
    trained->insert(trained->end(), refs.begin(), refs.end());
  }
  return minis;
}

// The denominators of the global batch: every rank's counts, summed (a float64 tensor on the
// model's device, as the communicator's backend wants it).
void sum_denominators_over_ranks(dist::Parallelism& parallel, std::vector<MiniBatch>& minis, const torch::Device& device) {
  const auto n_mini = static_cast<std::int64_t>(minis.size());
  std::vector<double> values;
  for (const MiniBatch& mb : minis) {
    values.push_back(mb.scale.global_tokens);
    values.push_back(mb.scale.global_sequences);
    values.push_back(mb.scale.global_rows);
  }
  at::Tensor counts = torch::tensor(values, torch::TensorOptions().dtype(torch::kFloat64).device(device)).view({n_mini, 3});
  std::vector<at::Tensor> t{counts};
  parallel.sum_over_ranks(t, "loss denominators");
  const at::Tensor summed = counts.to(torch::kCPU);  // read back on the host
  for (std::int64_t i = 0; i < n_mini; ++i) {
    MiniBatch& mb = minis[static_cast<std::size_t>(i)];
    mb.scale.global_tokens = summed[i][0].item<double>();
    mb.scale.global_sequences = summed[i][1].item<double>();
    mb.scale.global_rows = summed[i][2].item<double>();
  }
}

// The ratio's denominators and the reference log-probs of every computed sample (indexed by
// SampleRef::index; empty rows where unused).
struct StepLogprobs {
  std::vector<std::vector<float>> old_store, ref_store;
  bool old_from_first_pass = false;  // kAuto without a recompute: the first pass's own, detached
  bool any_rollout = false;          // some sample carries the backend's log-probs
};

// Whether the old log-probs are a no-grad pass of the policy before the update.
bool recomputes_old_logprobs(const UpdateOptions& o, std::size_t n_mini) {
  return o.old_logprobs == OldLogprobSource::kRecompute ||
         (o.old_logprobs == OldLogprobSource::kAuto && (n_mini > 1 || o.num_epochs > 1 || o.stale));
}

StepLogprobs old_and_reference_logprobs(CausalLM& policy, const UpdateComponents& components, const UpdateOptions& o,
                                        std::size_t n_mini, std::size_t n_samples, const std::vector<const SampleRef*>& trained) {
  StepLogprobs lp;
  const bool recompute = recomputes_old_logprobs(o, n_mini);
  lp.old_from_first_pass = o.old_logprobs == OldLogprobSource::kAuto && !recompute;
  lp.old_store.resize(n_samples);
  lp.ref_store.resize(n_samples);
  if (recompute) logprobs_into(policy, trained, o, &lp.old_store);
  if (o.old_logprobs == OldLogprobSource::kRollout)
    for (const SampleRef* r : trained) {
      if (!r->carries_rollout_logprobs())
        throw std::invalid_argument("update: train.old_logprobs is 'rollout' but " + r->name() +
                                    " carries no rollout log-probs (the backend did not return them)");
      lp.old_store[r->index] = r->s->rollout_logprobs;
    }
  if (needs_reference_model(o.kl)) {
    CausalLM reference = components.reference;  // a holder copy: same module
    const AdaptersOff base_model(components.reference_adapters_off);  // LoRA: the reference is the base
    logprobs_into(reference, trained, o, &lp.ref_store);
  }
  lp.any_rollout = std::any_of(trained.begin(), trained.end(), [](const SampleRef* r) { return r->carries_rollout_logprobs(); });
  return lp;
}

// What the passes accumulate over the step.
struct StepTotals {
  MetricSums sums;
  PendingMetrics pending;  // this optimizer step's values, still on the device
  double ratio_sum = 0.0, ratio_sq_sum = 0.0, ratio_tokens = 0.0;
  std::vector<double> norms_done;
  double norm_attempt_sum = 0.0, gradient_wait_s = 0.0;
  std::int64_t attempts = 0, micro_batch_count = 0;
};

// Everything a micro-batch's forward and backward read.
struct PassContext {
  CausalLM& policy;
  const UpdateComponents& components;
  const UpdateOptions& o;
  const StepLogprobs& lp;
  dist::Parallelism* dp;  // data parallel; null in one process
  torch::Device device;  // the policy's: every tensor of the loss lives there
  bool with_reference;
  double beta;           // KL coefficient in the loss (0 with KL in the reward)
};

// Metrics of one micro-batch (no grad), weighted by its response tokens; recorded on the device
// and read with the step's others (PendingMetrics).
void add_micro_batch_metrics(const PassContext& c, const torch::Tensor& mask, const torch::Tensor& logp, const torch::Tensor& old,
                             const torch::Tensor& ref, const torch::Tensor& kl, const torch::Tensor& policy_token_loss,
                             const ResponseLogProbs& fwd, const sdk::PolicyLossOutput& pg, bool entropy_pass, StepTotals& t) {
  torch::NoGradGuard no_grad;
  PendingMetrics& p = t.pending;
  const PendingMetrics::Value n = p.value(mask.sum());
  const torch::Tensor valid = mask > 0;
  auto token_mean = [&](const torch::Tensor& x) {
    return sdk::masked_mean(torch::where(valid, x.detach(), torch::zeros_like(mask)), mask);
  };
  const torch::Tensor policy_mean = token_mean(policy_token_loss);
  torch::Tensor kl_loss_mean = torch::zeros({}, policy_mean.options().dtype(torch::kDouble));  // in float64, as the sums
  p.add("loss/policy_avg", p.value(policy_mean), n);
  if (c.with_reference) {
    // Display estimators from REFERENCE.md on d = logp - ref, clamped to +-40 as open-instruct's.
    const torch::Tensor d = (logp.detach() - ref).clamp(-40.0, 40.0);
    const torch::Tensor kl_mean = token_mean(kl);
    kl_loss_mean = kl_mean.to(torch::kDouble) * c.beta;
    p.add("objective/kl", p.value(kl_mean), n);
    p.add("objective/kl_k1", p.value(token_mean(d)), n);
    p.add("objective/kl_k2", p.value(token_mean(0.5 * d * d)), n);
    p.add("objective/kl_k3", p.value(token_mean(torch::expm1(-d) + d)), n);
  }
  p.add("loss/kl_avg", p.value(kl_loss_mean), n);
  p.add("loss/total_avg", p.value(policy_mean.to(torch::kDouble) + kl_loss_mean), n);
  if (entropy_pass) p.add("objective/entropy", p.value(token_mean(fwd.entropy)), n);
  // float64 sums: the variance is a difference of two sums, float32 would drown it.
  const torch::Tensor ratio = torch::where(valid, torch::exp(logp.detach() - old), torch::zeros_like(mask)).to(torch::kDouble);
  p.accumulate(&t.ratio_sum, p.value(ratio.sum()));
  p.accumulate(&t.ratio_sq_sum, p.value((ratio * ratio).sum()));
  p.accumulate(&t.ratio_tokens, n);
  for (const auto& m : pg.metrics) {
    if (m.name == "val/ratio" || m.name == "val/ratio_var") continue;  // reported from the step's tokens in write_metrics
    p.add(loss_metric_name(m.name), p.value(m.value), n);
  }
}

// Micro-batch i of `mb`: one packed forward, the per-token loss, backward (gradients
// accumulate), metrics. Returns its share of the mini-batch loss (detached, on the device).
// `last`: the step's last backward (its gradients are final: the reduction can start during it).
torch::Tensor micro_batch_pass(const PassContext& c, const MiniBatch& mb, std::size_t i, bool entropy_pass, StepTotals& t,
                               bool last) {
  const UpdateOptions& o = c.o;
  const auto& micro = mb.micro[i];
  const std::int64_t width = mb.widths[i];
  const auto S = static_cast<std::int64_t>(micro.size());
  ++t.micro_batch_count;

  // Host-built per sample, then moved to the policy's device.
  std::vector<const std::vector<float>*> adv_rows, old_rows, ref_rows, rollout_rows;
  torch::Tensor carried = torch::zeros({S, 1}, torch::TensorOptions().dtype(torch::kBool).device(torch::kCPU));
  torch::Tensor group_ids = torch::empty({S}, torch::TensorOptions().dtype(torch::kLong).device(torch::kCPU));
  for (std::int64_t s = 0; s < S; ++s) {
    const SampleRef* r = micro[static_cast<std::size_t>(s)];
    adv_rows.push_back(&r->s->advantages);
    old_rows.push_back(&c.lp.old_store[r->index]);
    ref_rows.push_back(&c.lp.ref_store[r->index]);
    rollout_rows.push_back(r->carries_rollout_logprobs() ? &r->s->rollout_logprobs : nullptr);
    carried[s][0] = r->carries_rollout_logprobs();
    group_ids[s] = static_cast<std::int64_t>(r->group);
  }
  const torch::Tensor mask = to_device(mb.masks[i], c.device);

  const ResponseLogProbs fwd = packed_response_logprobs(c.policy, sequence_tokens(micro), width, logprob_options(o, entropy_pass));
  const torch::Tensor logp = fwd.logprobs;
  const torch::Tensor old = c.lp.old_from_first_pass ? logp.detach() : rows_tensor(old_rows, width, c.device);
  const torch::Tensor ref = c.with_reference ? rows_tensor(ref_rows, width, c.device) : torch::Tensor();
  torch::Tensor rollout;
  if (c.lp.any_rollout) rollout = torch::where(to_device(carried, c.device), rows_tensor(rollout_rows, width, c.device), old);

  sdk::PolicyLossInput in;
  in.batch.response_mask = mask;
  in.batch.group_ids = to_device(group_ids, c.device);
  in.logp = logp;
  in.old_logp = old;
  in.rollout_logp = rollout;
  in.advantages = rows_tensor(adv_rows, width, c.device);
  sdk::PolicyLossOutput pg = c.components.policy_loss->compute(in);
  if (!pg.per_token_loss.defined() || pg.per_token_loss.sizes() != logp.sizes())
    throw std::runtime_error("update: the policy loss returned a per-token loss of shape " +
                             (pg.per_token_loss.defined() ? c10::str(pg.per_token_loss.sizes()) : std::string("(undefined)")) +
                             ", expected " + c10::str(logp.sizes()));

  torch::Tensor policy_token_loss = pg.per_token_loss;
  if (c.lp.any_rollout) {
    MismatchCorrection mc = mismatch_correction(old, rollout, mask, o.mismatch);
    if (o.mismatch.mode != MismatchMode::kNone) policy_token_loss = policy_token_loss * mc.weights;
    const PendingMetrics::Value n = t.pending.value(mask.sum());
    for (const auto& m : mc.metrics) t.pending.add_by_suffix(m.name, t.pending.value(m.value), n);
  }
  torch::Tensor kl;
  if (c.with_reference) kl = c.components.kl_estimator->compute(logp, ref);
  const torch::Tensor per_token = add_kl_to_loss(policy_token_loss, kl, c.beta);
  torch::Tensor loss = aggregate_loss(per_token, mask, o.aggregation, mb.scale);
  if (o.router_aux_loss_coef > 0) {
    // The routers of this pass (recording is on for the update, update_policy).
    const std::vector<torch::Tensor> router_logits = c.policy->router_logits();
    if (!router_logits.empty()) {
      const ModelConfig& mc = c.policy->config();
      const torch::Tensor aux = load_balancing_loss(router_logits, mc.num_experts, mc.num_experts_per_tok);
      const double ranks = c.dp ? static_cast<double>(c.dp->world_size()) : 1.0;
      loss = loss + aux * (o.router_aux_loss_coef / (static_cast<double>(mb.micro.size()) * ranks));
      t.pending.add("loss/router_aux_avg", t.pending.value(aux), t.pending.value(mask.sum()));
    }
  }
  if (c.dp && last) c.dp->before_last_backward();
  if (loss.requires_grad()) loss.backward();

  add_micro_batch_metrics(c, mask, logp, old, ref, kl, policy_token_loss, fwd, pg, entropy_pass, t);
  return loss.detach();
}

// A forward and backward of one token with a zero loss: a pass's collectives, no gradient
// (the passes Parallelism::matched_passes adds).
// `last` as for micro_batch_pass.
void padding_pass(const PassContext& c, bool last) {
  const torch::Tensor ids = torch::zeros({1, 1}, torch::TensorOptions().dtype(torch::kLong).device(c.device));
  AttentionLayout layout = AttentionLayout::packed({1});
  layout.position_ids = layout.position_ids.to(c.device);
  const torch::Tensor loss = c.policy->forward(ids, layout).sum() * 0.0;
  if (c.dp && last) c.dp->before_last_backward();
  loss.backward();
}

// The optimizer step of a mini-batch whose micro-batches all ran: global norm, clipping, or
// a skip when the loss or the norm is non-finite.
void optimizer_step(const PassContext& c, torch::optim::Optimizer& optimizer, const std::function<void()>& after_optimizer_step,
                    double loss_sum, StepTotals& t, UpdateResult& result) {
  if (c.dp) {
    t.gradient_wait_s += c.dp->finish_gradients();  // .grad = the sum over ranks
    loss_sum = c.dp->sum_over_ranks(loss_sum, "loss");  // every rank skips a non-finite step alike
  }
  const double norm = clip_grad_norm(optimizer, c.o.max_grad_norm);
  ++t.attempts;
  t.norm_attempt_sum += norm;
  if (!std::isfinite(loss_sum) || !std::isfinite(norm)) {
    optimizer.zero_grad();
    c.policy->zero_grad();
    ++result.skipped_nonfinite;
    result.last_step_nonfinite = true;
    return;
  }
  optimizer.step();
  if (after_optimizer_step) after_optimizer_step();
  ++result.optimizer_steps;
  result.last_step_nonfinite = false;
  t.norms_done.push_back(norm);
}

// The step's metrics after the accumulated ones (update_policy's list, in its order).
void write_metrics(const StepTotals& t, const std::vector<MiniBatch>& minis, const UpdateOptions& o, bool data_parallel,
                   UpdateResult& result) {
  auto& out = result.metrics;
  t.sums.write(&out);
  const double ratio_mean = t.ratio_tokens > 0 ? t.ratio_sum / t.ratio_tokens : 1.0;
  const double ratio_var = t.ratio_tokens > 1
                               ? std::max(0.0, (t.ratio_sq_sum - t.ratio_sum * t.ratio_sum / t.ratio_tokens) / (t.ratio_tokens - 1.0))
                               : 0.0;
  out.emplace_back("val/ratio", ratio_mean);
  out.emplace_back("val/ratio_var", ratio_var);
  double grad_norm = 0.0;
  if (!t.norms_done.empty()) {
    for (double v : t.norms_done) grad_norm += v;
    grad_norm /= static_cast<double>(t.norms_done.size());
  } else if (t.attempts > 0) {
    grad_norm = t.norm_attempt_sum / static_cast<double>(t.attempts);  // every step skipped: the (non-finite) norm shows why
  }
  out.emplace_back("optimizer/grad_norm", grad_norm);
  out.emplace_back("train/optimizer_steps", static_cast<double>(result.optimizer_steps));
  out.emplace_back("train/skipped_nonfinite", static_cast<double>(result.skipped_nonfinite));
  out.emplace_back("train/micro_batches", static_cast<double>(t.micro_batch_count));
  double rows = 0.0, seqs = 0.0, tokens = 0.0;
  for (const MiniBatch& mb : minis) {
    rows += static_cast<double>(mb.plan.rows.size());
    seqs += static_cast<double>(mb.plan.sequences());
    tokens += static_cast<double>(mb.plan.tokens);
  }
  out.emplace_back("other/packed_ratio", seqs > 0 ? rows / seqs : 0.0);
  out.emplace_back("other/pack_utilization", rows > 0 ? tokens / (rows * static_cast<double>(o.pack_length)) : 0.0);
  if (data_parallel) out.emplace_back("time/gradient_allreduce", t.gradient_wait_s);
}

}  // namespace

UpdateResult update_policy(CausalLM& policy, torch::optim::Optimizer& optimizer, const std::function<void()>& after_optimizer_step,
                           const std::vector<Group>& groups, const UpdateComponents& components, const UpdateOptions& o) {
  const std::vector<SampleRef> all = flatten(groups);
  check_update(policy, components, o, all);
  const bool with_reference = needs_reference_model(o.kl);

  // ---- Mini-batches of whole groups; only trainable samples with response tokens are computed.
  dist::Parallelism* dp = components.parallelism;
  if (dp && (!dp->data_parallel() || components.first_group + groups.size() > components.global_groups))
    throw std::invalid_argument("update: inconsistent data-parallel settings (parallelism, group range)");
  const std::size_t first_group = dp ? components.first_group : 0;  // global index of groups[0]
  const std::size_t global_groups = dp ? components.global_groups : groups.size();
  const torch::Device device = policy->lm_head_weight().device();
  std::vector<const SampleRef*> trained;  // every computed sample of the step
  std::vector<MiniBatch> minis = plan_mini_batches(all, first_group, global_groups, o, &trained);
  if (dp && !minis.empty()) sum_denominators_over_ranks(*dp, minis, device);

  // ---- Old, rollout and reference log-probs, with the whole policy on every rank (the ranks'
  // counts of these passes differ).
  StepLogprobs lp;
  {
    // Only when a no-grad pass of the policy runs (the old log-probs, or the reference = the
    // policy without its LoRA adapters); any rank's need is every rank's (o.stale is this rank's).
    const bool policy_passes =
        recomputes_old_logprobs(o, minis.size()) || (with_reference && components.reference_adapters_off != nullptr);
    std::optional<dist::Parallelism::WholeModel> whole;
    if (dp) whole.emplace(dp->whole_model_if_any_rank(policy_passes, "no-grad policy passes"));
    lp = old_and_reference_logprobs(policy, components, o, minis.size(), all.size(), trained);
  }

  // ---- The passes.
  const PassContext c{policy, components, o, lp, dp, device, with_reference, loss_kl_coef(o.kl)};
  struct RouterRecording {  // on for the passes only, and off again however they end
    CausalLM& model;
    bool on;
    ~RouterRecording() {
      if (on) model->set_record_router_logits(false);
    }
  } recording{policy, o.router_aux_loss_coef > 0 && policy->config().num_experts > 0};
  if (recording.on && policy->gradient_checkpointing())
    throw std::invalid_argument("update: the router load-balancing loss needs the routers' graph, which activation "
                                "checkpointing drops (train.router_aux_loss_coef with train.gradient_checkpointing)");
  if (recording.on) policy->set_record_router_logits(true);
  UpdateResult result;
  StepTotals totals;
  for (std::int64_t epoch = 0; epoch < o.num_epochs; ++epoch) {
    const bool entropy_pass = o.with_entropy && epoch == 0;
    for (MiniBatch& mb : minis) {
      // Nothing trainable in the (global) mini-batch: no optimizer step. The same on every rank:
      // the denominators are global.
      if (mb.scale.global_tokens == 0.0) continue;
      optimizer.zero_grad();
      policy->zero_grad(/*set_to_none=*/true);
      torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device));
      {
        // bf16-mixed: the micro-batches' forward and backward in bf16 (core/model/precision.h).
        const ComputePrecisionScope precision(o.precision, device);
        const std::size_t passes = dp ? dp->matched_passes(mb.micro.size()) : mb.micro.size();
        for (std::size_t i = 0; i < passes; ++i) {
          if (i < mb.micro.size())
            loss_sum = loss_sum + micro_batch_pass(c, mb, i, entropy_pass, totals, i + 1 == passes).to(torch::kDouble);
          else
            padding_pass(c, i + 1 == passes);
        }
      }
      // The host reads this step's values here, once: the loss (for the finiteness check) and the metrics.
      double loss_value = 0.0;
      totals.pending.accumulate(&loss_value, totals.pending.value(loss_sum));
      totals.pending.flush(totals.sums);
      optimizer_step(c, optimizer, after_optimizer_step, loss_value, totals, result);
    }
  }
  optimizer.zero_grad();
  policy->zero_grad(/*set_to_none=*/true);  // frees the gradient memory between steps
  if (dp) dp->after_update();

  write_metrics(totals, minis, o, dp != nullptr, result);
  return result;
}

}  // namespace grpo::core
