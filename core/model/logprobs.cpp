#include "core/model/logprobs.h"

#include <torch/version.h>

#include <atomic>
#include <stdexcept>

#include "core/model/precision.h"

namespace grpo::core {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void check_inputs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                  const LogProbOptions& options) {
  if (weight.dim() != 2 || hidden.size(-1) != weight.size(1))
    throw std::invalid_argument("token_logprobs: lm_head_weight must be [vocab, hidden] matching hidden's last dim");
  if (hidden.sizes().slice(0, hidden.dim() - 1) != targets.sizes())
    throw std::invalid_argument("token_logprobs: targets must have hidden's shape without the last dim");
  if (targets.scalar_type() != torch::kLong) throw std::invalid_argument("token_logprobs: targets must be int64");
  // The range on the host only: reading a device tensor's min and max would stall the host
  // inside every training micro-batch (callers with device targets check their host ids, as
  // core/train/packing does).
  if (targets.is_cpu() && targets.numel() > 0 &&
      (targets.min().item<int64_t>() < 0 || targets.max().item<int64_t>() >= weight.size(0)))
    throw std::invalid_argument("token_logprobs: a target id is outside [0, " + std::to_string(weight.size(0)) + ")");
  if (options.chunk_tokens <= 0) throw std::invalid_argument("token_logprobs: chunk_tokens must be > 0");
  if (options.logit_softcap < 0) throw std::invalid_argument("token_logprobs: logit_softcap must be >= 0");
  if (!(options.temperature > 0)) throw std::invalid_argument("token_logprobs: temperature must be > 0");
}

// The LM head in the dtype its matmuls run in: the weight itself, or (bf16-mixed: autocast on)
// one bf16 copy of the float32 master for the whole call instead of one per chunk.
torch::Tensor compute_weight(const torch::Tensor& weight, torch::Dtype compute) {
  return compute == weight.scalar_type() ? weight : weight.to(compute);
}

// Logits of one chunk in float32: softcap(h W^T) / temperature, the matmul in `weight`'s dtype
// (bf16-mixed: rounded to bf16 and widened, as transformers' lm_head under autocast gives them).
torch::Tensor chunk_logits(const torch::Tensor& h, const torch::Tensor& weight, double temperature, double softcap) {
  auto z = torch::matmul(h.to(weight.scalar_type()), weight.t()).to(torch::kFloat32);
  if (softcap > 0) z = torch::tanh(z / softcap) * softcap;
  return temperature == 1.0 ? z : z.div_(temperature);
}

// LibTorch 2.9+ on CUDA: the LM head's gradient accumulates over the chunks inside its bf16
// product (addmm with a float32 accumulator, beta = 1), not as a bf16 product added to it in a
// pass of its own: one [vocab, hidden] bf16 write and a float32 read-modify-write fewer per
// chunk, and the sum is not rounded to bf16 on the way (more exact, not less). ATen's checks on
// this overload changed between versions (2.9 wants the accumulator in the operands' dtype):
// the first refusal switches this process to the plain product; an out-of-memory error is not a
// refusal and propagates.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
std::atomic<bool> float32_accumulation_refused{false};

bool accumulated_in_float32(torch::Tensor& grad_w, const torch::Tensor& a, const torch::Tensor& b) {
  if (!grad_w.is_cuda() || a.scalar_type() != torch::kBFloat16 || float32_accumulation_refused.load()) return false;
  try {
    at::addmm_out(grad_w, grad_w, a.t(), b, torch::kFloat32);
    return true;
  } catch (const c10::OutOfMemoryError&) {
    throw;
  } catch (const c10::Error&) {
    float32_accumulation_refused.store(true);
    return false;
  }
}
#else
bool accumulated_in_float32(torch::Tensor&, const torch::Tensor&, const torch::Tensor&) { return false; }
#endif

// grad_w (float32) += a^T b for a [chunk, vocab], b [chunk, hidden], both in the compute dtype
// (bf16-mixed).
void accumulate_weight_grad(torch::Tensor& grad_w, const torch::Tensor& a, const torch::Tensor& b) {
  if (!accumulated_in_float32(grad_w, a, b)) grad_w.add_(torch::matmul(a.t(), b));
}

// Forward keeps only the per-token log-sum-exp; backward recomputes each chunk's logits.
// d logp_t / dz = onehot(t) - p;  d H / dz = -p (log p + H).
class ChunkedLogProb : public torch::autograd::Function<ChunkedLogProb> {
 public:
  static variable_list forward(AutogradContext* ctx, torch::Tensor hidden, torch::Tensor weight,
                               torch::Tensor targets, int64_t chunk, double temperature, bool with_entropy,
                               double softcap) {
    const int64_t n = hidden.size(0);
    // Explicit casts instead of autocast's: the backward below runs wherever autograd runs it.
    const torch::Dtype compute = autocast_compute_dtype(weight);
    const torch::Tensor w = compute_weight(weight, compute);
    auto logp = torch::empty({n}, hidden.options().dtype(torch::kFloat32));
    auto lse = torch::empty({n}, hidden.options().dtype(torch::kFloat32));
    auto entropy = with_entropy ? torch::empty({n}, hidden.options().dtype(torch::kFloat32))
                                : torch::zeros({n}, hidden.options().dtype(torch::kFloat32));
    // In-place work keeps a chunk's peak at two [chunk, vocab] float32 buffers (plus the
    // matmul's own output in the weight's dtype when that is not float32).
    for (int64_t start = 0; start < n; start += chunk) {
      const int64_t len = std::min(chunk, n - start);
      auto z = chunk_logits(hidden.narrow(0, start, len), w, temperature, softcap);
      auto l = torch::logsumexp(z, -1, /*keepdim=*/true);
      lse.narrow(0, start, len).copy_(l.squeeze(1));
      // log p_t = z_t - lse: the same subtraction as on the whole log-softmax, on one column.
      logp.narrow(0, start, len).copy_((z.gather(1, targets.narrow(0, start, len).unsqueeze(1)) - l).squeeze(1));
      if (with_entropy) {
        z.sub_(l);  // now log-softmax
        entropy.narrow(0, start, len).copy_(z.exp().mul_(z).sum(-1).neg_());
      }
    }
    ctx->save_for_backward({hidden, weight, targets, lse, entropy});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["with_entropy"] = with_entropy;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["compute_dtype"] = static_cast<int64_t>(compute);
    if (!with_entropy) ctx->mark_non_differentiable({entropy});
    return {logp, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto hidden = saved[0], weight = saved[1], targets = saved[2], lse = saved[3], entropy = saved[4];
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const bool with_entropy = ctx->saved_data["with_entropy"].toBool();
    const double softcap = ctx->saved_data["softcap"].toDouble();
    const auto compute = static_cast<torch::Dtype>(ctx->saved_data["compute_dtype"].toInt());
    const torch::Tensor w = compute_weight(weight, compute);
    const bool mixed = compute != weight.scalar_type();
    auto g_logp = grads[0];
    auto g_ent = with_entropy ? grads[1] : torch::Tensor();
    const bool need_h = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    const int64_t n = hidden.size(0);

    torch::Tensor grad_h = need_h ? torch::empty_like(hidden) : torch::Tensor();
    torch::Tensor grad_w = need_w ? torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat32)) : torch::Tensor();
    for (int64_t start = 0; start < n; start += chunk) {
      const int64_t len = std::min(chunk, n - start);
      auto h = hidden.narrow(0, start, len);
      auto z = chunk_logits(h, w, temperature, softcap);
      // Soft-cap: d(c tanh(u / c))/du = 1 - (capped / c)^2, from the capped logits before z is reused.
      const torch::Tensor cap_slope = softcap > 0 ? 1 - (z * (temperature / softcap)).square() : torch::Tensor();
      z.sub_(lse.narrow(0, start, len).unsqueeze(1));  // log p
      auto gz = z.exp();                                 // p
      if (g_ent.defined()) {
        // dH/dz = -p (log p + H), accumulated into z's buffer.
        auto g = g_ent.narrow(0, start, len).to(torch::kFloat32).unsqueeze(1);
        z.add_(entropy.narrow(0, start, len).unsqueeze(1)).mul_(gz).mul_(-g);
      }
      if (g_logp.defined()) {
        // dlogp_t/dz = onehot(t) - p
        auto g = g_logp.narrow(0, start, len).to(torch::kFloat32).unsqueeze(1);
        gz.mul_(-g).scatter_add_(1, targets.narrow(0, start, len).unsqueeze(1), g);
      } else {
        gz.zero_();
      }
      if (g_ent.defined()) gz.add_(z);
      if (temperature != 1.0) gz.div_(temperature);
      if (cap_slope.defined()) gz.mul_(cap_slope);
      // bf16-mixed: both products in bf16 (as autocast's linear would) from one bf16 copy of
      // the logits' gradient, the weight's accumulated over chunks in float32. (gz itself when
      // the compute dtype is float32.)
      const torch::Tensor gz_compute = gz.to(compute);
      if (need_h) grad_h.narrow(0, start, len).copy_(torch::matmul(gz_compute, w));
      if (need_w && mixed) accumulate_weight_grad(grad_w, gz_compute, h.to(compute));
      if (need_w && !mixed) grad_w.addmm_(gz.t(), h.to(torch::kFloat32));
    }
    if (need_w) grad_w = grad_w.to(weight.scalar_type());
    return {grad_h, grad_w, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

TokenLogProbs token_logprobs(const torch::Tensor& hidden, const torch::Tensor& lm_head_weight,
                             const torch::Tensor& targets, const LogProbOptions& options) {
  check_inputs(hidden, lm_head_weight, targets, options);
  auto flat_h = hidden.reshape({-1, hidden.size(-1)});
  auto flat_t = targets.reshape({-1});
  auto out = ChunkedLogProb::apply(flat_h, lm_head_weight, flat_t, options.chunk_tokens, options.temperature,
                                   options.with_entropy, options.logit_softcap);
  TokenLogProbs result;
  result.logprobs = out[0].view(targets.sizes());
  if (options.with_entropy) result.entropy = out[1].view(targets.sizes());
  return result;
}

TokenLogProbs token_logprobs_naive(const torch::Tensor& hidden, const torch::Tensor& lm_head_weight,
                                   const torch::Tensor& targets, const LogProbOptions& options) {
  check_inputs(hidden, lm_head_weight, targets, options);
  auto logits = torch::matmul(hidden, lm_head_weight.t()).to(torch::kFloat32);
  if (options.logit_softcap > 0) logits = torch::tanh(logits / options.logit_softcap) * options.logit_softcap;
  logits = logits / options.temperature;
  auto all = torch::log_softmax(logits, -1);
  TokenLogProbs result;
  result.logprobs = all.gather(-1, targets.unsqueeze(-1)).squeeze(-1);
  if (options.with_entropy) result.entropy = -(all.exp() * all).sum(-1);
  return result;
}

}  // namespace grpo::core
