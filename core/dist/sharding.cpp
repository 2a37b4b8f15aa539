#include "core/dist/sharding.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "core/dist/process_group.h"

namespace grpo::core::dist {

const char* sharding_name(Sharding sharding) {
  switch (sharding) {
    case Sharding::kOptimizer: return "optimizer";
    case Sharding::kGradients: return "gradients";
    case Sharding::kFull: return "full";
    case Sharding::kNone: break;
  }
  return "none";
}

std::optional<Sharding> parse_sharding(std::string_view name) {
  if (name == "none") return Sharding::kNone;
  if (name == "optimizer") return Sharding::kOptimizer;
  if (name == "gradients") return Sharding::kGradients;
  if (name == "full") return Sharding::kFull;
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
ShardLayout::ShardLayout(const std::vector<at::Tensor>& params, std::vector<std::vector<std::size_t>> units, int rank,
                         int world)
    : rank_(rank), world_(world) {
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("shard layout: rank " + std::to_string(rank) + " of " + std::to_string(world));
  std::vector<int> seen(params.size(), 0);
  for (std::size_t source = 0; source < units.size(); ++source) {
    auto& members = units[source];
    if (members.empty()) continue;
    Unit u;
    u.source = source;
    u.params = std::move(members);
    for (std::size_t k : u.params) {
      if (k >= params.size() || seen[k]++)
        throw std::invalid_argument("shard layout: the units are not a partition of the " + std::to_string(params.size()) +
                                    " parameters (index " + std::to_string(k) + ")");
      u.offsets.push_back(u.numel);
      u.numel += params[k].numel();
    }
    u.chunk = (u.numel + world - 1) / world;
    u.shard_offset = shard_numel_;
    shard_numel_ += u.chunk;
    // This rank's chunk [begin, end) of the unit's values, cut into per-parameter pieces.
    const std::int64_t begin = u.chunk * rank, end = std::min(u.numel, begin + u.chunk);
    for (std::size_t i = 0; i < u.params.size(); ++i) {
      const std::int64_t a = std::max(begin, u.offsets[i]);
      const std::int64_t b = std::min(end, u.offsets[i] + params[u.params[i]].numel());
      if (a < b) pieces_.push_back({units_.size(), u.params[i], a - u.offsets[i], b - a, u.shard_offset + (a - begin)});
    }
    units_.push_back(std::move(u));
  }
  for (std::size_t k = 0; k < params.size(); ++k)
    if (!seen[k]) throw std::invalid_argument("shard layout: parameter " + std::to_string(k) + " is in no unit");
}

std::vector<std::vector<std::size_t>> decoder_units(const std::vector<std::string>& names) {
  std::vector<std::vector<std::size_t>> units(1);  // [0]: everything outside the decoder layers
  const std::string prefix = "model.layers.";
  for (std::size_t k = 0; k < names.size(); ++k) {
    const std::string& n = names[k];
    if (n.rfind(prefix, 0) != 0) {
      units[0].push_back(k);
      continue;
    }
    const std::size_t layer = std::stoul(n.substr(prefix.size()));
    if (units.size() < layer + 2) units.resize(layer + 2);
    units[layer + 1].push_back(k);
  }
  return units;
}

std::vector<std::int64_t> decoder_unit_layers(std::size_t units) {
  std::vector<std::int64_t> layers;
  for (std::size_t k = 0; k < units; ++k) layers.push_back(static_cast<std::int64_t>(k) - 1);
  return layers;
}

// ---------------------------------------------------------------------------------------------
namespace {

// A storage emptied to 0 bytes or given back its bytes, the same storage object either way
// (views of it and the tensors autograd saved keep pointing at it).
void free_storage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void allocate_storage(const at::Tensor& t, std::size_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

std::size_t buffer_bytes(const at::Tensor& buffer) { return static_cast<std::size_t>(buffer.numel()) * buffer.element_size(); }

}  // namespace

ShardedParameters::ShardedParameters(std::vector<at::Tensor> params, const ShardLayout& layout,
                                     const std::vector<std::int64_t>& layer_of_source, Communicator& comm)
    : params_(std::move(params)), layout_(layout), comm_(comm) {
  torch::NoGradGuard no_grad;
  const auto opts = params_.front().options().requires_grad(false);
  const int world = layout_.world();
  for (std::size_t u = 0; u < layout_.units().size(); ++u) {
    const ShardLayout::Unit& unit = layout_.units()[u];
    at::Tensor buffer = torch::zeros({unit.chunk * world}, opts);
    for (std::size_t i = 0; i < unit.params.size(); ++i) {
      at::Tensor& p = params_[unit.params[i]];
      at::Tensor view = buffer.narrow(0, unit.offsets[i], p.numel()).view(p.sizes());
      view.copy_(p.detach());
      p.set_data(view);  // the module's parameter, now a view of the unit's buffer
    }
    buffers_.push_back(buffer);
    gathered_.push_back(true);
    const std::int64_t layer = unit.source < layer_of_source.size() ? layer_of_source[unit.source] : -1;
    if (layer < 0) {
      if (has_rest_) throw std::invalid_argument("ShardedParameters: more than one unit outside the decoder layers");
      rest_unit_ = u;
      has_rest_ = true;
      continue;
    }
    if (layer_units_.size() <= static_cast<std::size_t>(layer)) layer_units_.resize(static_cast<std::size_t>(layer) + 1, SIZE_MAX);
    layer_units_[static_cast<std::size_t>(layer)] = u;
  }
  shard_ = torch::zeros({layout_.shard_numel()}, opts);
  capture();
}

std::size_t ShardedParameters::unit_of_layer(std::int64_t layer) const {
  if (layer >= 0 && static_cast<std::size_t>(layer) < layer_units_.size() && layer_units_[static_cast<std::size_t>(layer)] != SIZE_MAX)
    return layer_units_[static_cast<std::size_t>(layer)];
  return has_rest_ ? rest_unit_ : SIZE_MAX;  // LoRA: the adapters' one unit serves every layer
}

void ShardedParameters::acquire(std::int64_t layer) {
  const std::size_t u = unit_of_layer(layer);
  if (u != SIZE_MAX) gather(u);
}

void ShardedParameters::release(std::int64_t layer) {
  if (layer < 0) return;  // the rest stays until its owner frees it (LayerParameterResidency)
  const std::size_t u = unit_of_layer(layer);
  if (u != SIZE_MAX && !(has_rest_ && u == rest_unit_)) free(u);
}

void ShardedParameters::gather(std::size_t u) {
  if (gathered_[u]) return;
  const ShardLayout::Unit& unit = layout_.units()[u];
  at::Tensor& buffer = buffers_[u];
  allocate_storage(buffer, buffer_bytes(buffer));
  std::vector<at::Tensor> outputs;
  for (int r = 0; r < layout_.world(); ++r) outputs.push_back(buffer.narrow(0, unit.chunk * r, unit.chunk));
  at::Tensor mine = shard_.narrow(0, unit.shard_offset, unit.chunk);
  try {
    comm_.all_gather(outputs, mine, "parameters (unit " + std::to_string(u + 1) + " of " + std::to_string(layout_.units().size()) + ")");
  } catch (...) {
    free_storage(buffer);  // never left allocated with values that were not gathered
    throw;
  }
  gathered_[u] = true;
}

void ShardedParameters::free(std::size_t u) {
  if (!gathered_[u] || holds_ > 0) return;
  free_storage(buffers_[u]);
  gathered_[u] = false;
}

void ShardedParameters::gather_all() {
  for (std::size_t u = 0; u < buffers_.size(); ++u) gather(u);
}

void ShardedParameters::free_all() {
  for (std::size_t u = 0; u < buffers_.size(); ++u) free(u);
}

void ShardedParameters::capture() {
  torch::NoGradGuard no_grad;
  for (std::size_t u = 0; u < buffers_.size(); ++u) {
    if (!gathered_[u]) throw std::logic_error("ShardedParameters::capture: unit " + std::to_string(u) + " is not gathered");
    const ShardLayout::Unit& unit = layout_.units()[u];
    shard_.narrow(0, unit.shard_offset, unit.chunk).copy_(buffers_[u].narrow(0, unit.chunk * layout_.rank(), unit.chunk));
  }
}

std::int64_t ShardedParameters::resident_bytes() const {
  std::int64_t bytes = shard_.numel() * static_cast<std::int64_t>(shard_.element_size());
  for (const at::Tensor& b : buffers_) bytes += static_cast<std::int64_t>(b.storage().nbytes());
  return bytes;
}

ShardedParameters::Hold::Hold(ShardedParameters* params) : params_(params) {
  if (!params_) return;
  params_->gather_all();
  ++params_->holds_;
}

ShardedParameters::Hold::~Hold() {
  if (!params_) return;
  if (--params_->holds_ == 0) params_->free_all();
}

// ---------------------------------------------------------------------------------------------
ShardedAdamW::ShardedAdamW(std::vector<at::Tensor> params, std::vector<std::vector<std::size_t>> units,
                           const OptimizerSettings& settings, Communicator& comm, Sharding mode,
                           const std::vector<std::int64_t>& layer_of_unit)
    : torch::optim::Optimizer(adamw_param_groups(params, settings),
                              std::make_unique<torch::optim::AdamWOptions>(adamw_options(settings, settings.weight_decay))),
      params_(std::move(params)),
      comm_(comm),
      mode_(mode),
      layout_(params_, std::move(units), comm.rank(), comm.world_size()) {
  if (mode == Sharding::kNone) throw std::invalid_argument("ShardedAdamW: dist.sharding none needs no sharded optimizer");
  if (params_.empty()) throw std::invalid_argument("ShardedAdamW: no trainable parameter");
  for (const auto& p : params_)
    if (p.scalar_type() != params_.front().scalar_type() || p.device() != params_.front().device())
      throw std::invalid_argument("ShardedAdamW: the trainable parameters differ in dtype or device");
  for (const auto& p : params_) group_of_.push_back(adamw_decays(p) ? 0 : 1);
  const auto opts = params_.front().options().requires_grad(false);
  exp_avg_ = torch::zeros({layout_.shard_numel()}, opts);
  exp_avg_sq_ = torch::zeros({layout_.shard_numel()}, opts);
  if (mode == Sharding::kGradients || mode == Sharding::kFull) grad_shard_ = torch::zeros({layout_.shard_numel()}, opts);
  if (mode == Sharding::kFull) sharded_params_ = std::make_shared<ShardedParameters>(params_, layout_, layer_of_unit, comm_);
}

at::Tensor ShardedAdamW::param_values(std::size_t k) const { return params_[k].detach().view(-1); }

torch::Tensor ShardedAdamW::step(LossClosure closure) {
  if (closure) throw std::invalid_argument("ShardedAdamW::step takes no closure");
  // A held model keeps its gathered copies, which the step would leave stale.
  if (sharded_params_ && sharded_params_->held()) throw std::logic_error("ShardedAdamW::step under a ShardedParameters::Hold");
  torch::NoGradGuard no_grad;
  ++step_;
  for (const ShardLayout::Piece& piece : layout_.pieces()) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(param_groups()[group_of_[piece.param]].options());
    at::Tensor grad;
    if (mode_ == Sharding::kOptimizer) {
      const at::Tensor& full = params_[piece.param].grad();
      // The reducer leaves every parameter a gradient (zeros where no rank had one).
      if (!full.defined()) throw std::logic_error("ShardedAdamW: a parameter has no gradient after the reduction");
      grad = full.view(-1).narrow(0, piece.param_offset, piece.length);
    } else {
      grad = grad_shard_.narrow(0, piece.shard_offset, piece.length);
    }
    at::Tensor p = sharded_params_ ? sharded_params_->shard().narrow(0, piece.shard_offset, piece.length)
                                   : param_values(piece.param).narrow(0, piece.param_offset, piece.length);
    at::Tensor exp_avg = exp_avg_.narrow(0, piece.shard_offset, piece.length);
    at::Tensor exp_avg_sq = exp_avg_sq_.narrow(0, piece.shard_offset, piece.length);
    // torch::optim::AdamW::step's operations, in its order.
    if (options.weight_decay() != 0) p.mul_(1 - options.lr() * options.weight_decay());
    const double beta1 = std::get<0>(options.betas()), beta2 = std::get<1>(options.betas());
    const double bias_correction1 = 1 - std::pow(beta1, step_);
    const double bias_correction2 = 1 - std::pow(beta2, step_);
    exp_avg.mul_(beta1).add_(grad, 1 - beta1);
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
    const at::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(options.eps());
    p.addcdiv_(exp_avg, denom, -options.lr() / bias_correction1);
  }
  if (sharded_params_) {
    sharded_params_->free_all();  // the gathered copies are stale now; passes gather the new values
  } else {
    all_gather_parameters();
  }
  return {};
}

// Every rank's updated chunk of every unit to every rank, one unit at a time.
void ShardedAdamW::all_gather_parameters() {
  const int world = layout_.world();
  const auto opts = params_.front().options().requires_grad(false);
  const std::vector<ShardLayout::Piece>& pieces = layout_.pieces();  // in unit order
  std::size_t next_piece = 0;
  for (std::size_t u = 0; u < layout_.units().size(); ++u) {
    const ShardLayout::Unit& unit = layout_.units()[u];
    at::Tensor mine = torch::zeros({unit.chunk}, opts);  // this rank's chunk, from its pieces (padding 0)
    for (; next_piece < pieces.size() && pieces[next_piece].unit == u; ++next_piece) {
      const ShardLayout::Piece& piece = pieces[next_piece];
      mine.narrow(0, piece.shard_offset - unit.shard_offset, piece.length)
          .copy_(param_values(piece.param).narrow(0, piece.param_offset, piece.length));
    }
    at::Tensor all = torch::empty({unit.chunk * world}, opts);
    std::vector<at::Tensor> outputs;
    for (int r = 0; r < world; ++r) outputs.push_back(all.narrow(0, unit.chunk * r, unit.chunk));
    comm_.all_gather(outputs, mine, "updated parameters (unit " + std::to_string(u + 1) + " of " +
                                        std::to_string(layout_.units().size()) + ")");
    for (std::size_t i = 0; i < unit.params.size(); ++i) {
      const std::int64_t n = params_[unit.params[i]].numel();
      param_values(unit.params[i]).copy_(all.narrow(0, unit.offsets[i], n));
    }
  }
}

double ShardedAdamW::clip_grad_norm(double max_norm) {
  torch::NoGradGuard no_grad;
  if (mode_ == Sharding::kOptimizer) return measure_and_clip(max_norm);  // the full, all-reduced .grad
  // The sum of squares of this rank's gradient shard (padding is zero), summed over ranks.
  const double local = grad_shard_.to(torch::kDouble).pow(2).sum().item<double>();
  const double norm = std::sqrt(comm_.all_reduce_sum(local, "gradient norm"));
  if (std::isfinite(norm) && max_norm > 0.0 && norm > max_norm) grad_shard_.mul_(max_norm / (norm + 1e-6));
  return norm;
}

std::int64_t ShardedAdamW::state_bytes() const {
  return (exp_avg_.numel() + exp_avg_sq_.numel()) * static_cast<std::int64_t>(exp_avg_.element_size());
}

void ShardedAdamW::save(torch::serialize::OutputArchive& archive) const {
  archive.write("sharding", torch::tensor({static_cast<std::int64_t>(mode_)}));
  archive.write("world_size", torch::tensor({static_cast<std::int64_t>(layout_.world())}));
  archive.write("rank", torch::tensor({static_cast<std::int64_t>(layout_.rank())}));
  archive.write("shard_numel", torch::tensor({layout_.shard_numel()}));
  archive.write("step", torch::tensor({step_}));
  archive.write("exp_avg", exp_avg_.to(torch::kCPU));
  archive.write("exp_avg_sq", exp_avg_sq_.to(torch::kCPU));
}

namespace {

std::int64_t archive_scalar(torch::serialize::InputArchive& archive, const char* key) {
  at::Tensor t;
  archive.read(key, t);
  return t.item<std::int64_t>();
}

}  // namespace

void ShardedAdamW::check_state(torch::serialize::InputArchive& archive) const {
  const std::int64_t world = archive_scalar(archive, "world_size"), rank = archive_scalar(archive, "rank");
  const std::int64_t numel = archive_scalar(archive, "shard_numel");
  if (world != layout_.world() || rank != layout_.rank() || numel != layout_.shard_numel())
    throw std::runtime_error("the optimizer shard is rank " + std::to_string(rank) + " of " + std::to_string(world) +
                             " with " + std::to_string(numel) + " values; this is rank " + std::to_string(layout_.rank()) +
                             " of " + std::to_string(layout_.world()) + " with " + std::to_string(layout_.shard_numel()) +
                             " (resume with the world size and the model of the run that saved it)");
  at::Tensor m, v;
  archive.read("exp_avg", m);
  archive.read("exp_avg_sq", v);
  if (m.numel() != numel || v.numel() != numel) throw std::runtime_error("the optimizer shard's moments are not of its size");
}

void ShardedAdamW::load(torch::serialize::InputArchive& archive) {
  check_state(archive);
  at::Tensor m, v;
  archive.read("exp_avg", m);
  archive.read("exp_avg_sq", v);
  const std::int64_t step = archive_scalar(archive, "step");
  torch::NoGradGuard no_grad;
  exp_avg_.copy_(m);
  exp_avg_sq_.copy_(v);
  step_ = step;
}

void check_sharding_collectives(Communicator& comm, Sharding mode, const at::Tensor& like) {
  if (mode == Sharding::kNone) return;
  torch::NoGradGuard no_grad;
  const auto opts = like.options().requires_grad(false);
  const int world = comm.world_size();
  std::string step = "all-gather";
  try {
    at::Tensor mine = torch::full({1}, comm.rank() + 1, opts);
    at::Tensor all = torch::zeros({world}, opts);
    std::vector<at::Tensor> outputs;
    for (int r = 0; r < world; ++r) outputs.push_back(all.narrow(0, r, 1));
    comm.all_gather(outputs, mine, "dist.sharding check: all-gather");
    if (mode != Sharding::kOptimizer) {
      step = "reduce";
      at::Tensor one = torch::ones({1}, opts);
      comm.reduce_sum_async(one, 0, "dist.sharding check: reduce").wait();
    }
  } catch (const std::exception& e) {
    // Refused when issued, or failed with every peer alive (the backend's own check in its
    // worker, as Gloo's dtype check): this backend's limit. A lost peer stays what it is.
    const auto* lost = dynamic_cast<const PeerLostError*>(&e);
    if (lost && lost->lost_rank() >= 0) throw;
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));  // without c10's backtrace
    throw std::runtime_error(std::string("dist.sharding ") + sharding_name(mode) + " composes c10d's " + step + " of " +
                             std::string(c10::toString(like.scalar_type())) + " tensors on " + like.device().str() +
                             ", and this backend cannot serve it (" + why +
                             "): use another dist.backend or model.dtype, or dist.sharding none");
  }
}

std::int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer) {
  if (const auto* sharded = dynamic_cast<const ShardedAdamW*>(&optimizer)) return sharded->state_bytes();
  std::int64_t bytes = 0;
  for (const auto& [key, state] : optimizer.state())
    if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(state.get()))
      for (const at::Tensor* t : {&adamw->exp_avg(), &adamw->exp_avg_sq(), &adamw->max_exp_avg_sq()})
        if (t->defined()) bytes += t->numel() * static_cast<std::int64_t>(t->element_size());
  return bytes;
}

}  // namespace grpo::core::dist
