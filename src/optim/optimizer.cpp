// Optimizer base, parameter grouping, gradient clipping, LR schedule.
#include <cmath>

#include "ember/autograd.h"
#include "ember/ops.h"
#include "ember/optim.h"
#include "kernels/multi_tensor.h"
#include "optim/device_sums.h"

namespace ember::optim {

void DeviceSums::add(const Tensor& value) {
  for (Tensor& s : sums_)
    if (s.device() == value.device()) {
      s = s + value;
      return;
    }
  sums_.push_back(value);
}

double DeviceSums::total() const {
  double t = 0;
  for (const Tensor& s : sums_) t += s.item();
  return t;
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr) : groups_(std::move(groups)), lr_(lr) {
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params)
      EMBER_CHECK(p.defined() && p.requires_grad(),
                  "optimizer: every parameter must be a defined tensor that requires grad");
}

void Optimizer::zero_grad() {
  for (ParamGroup& g : groups_)
    for (Tensor& p : g.params) p.set_grad(Tensor());
}

std::vector<ParamGroup> decay_groups(const nn::Module& m, double weight_decay) {
  ParamGroup decay{{}, weight_decay}, no_decay{{}, 0.0};
  for (auto& [name, p] : m.named_parameters()) (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  return {decay, no_decay};
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (multi_tensor::takes(grads)) {
    // Every grad on one GPU: one launch for the squares, one for the scaling, which reads the
    // norm on the device (no wait for the GPU here).
    Tensor sum_sq = multi_tensor::sum_of_squares(grads);
    multi_tensor::clip_(grads, sum_sq, max_norm);
    return sum_sq.sqrt();
  }
  DeviceSums squares;  // in float64, summed on each device
  for (const Tensor& g : grads) {
    Tensor g64 = g.to(DType::Float64);
    squares.add((g64 * g64).sum());
  }
  const double norm = std::sqrt(squares.total());
  if (std::isfinite(norm) && norm > max_norm && max_norm > 0) {
    const double scale = max_norm / (norm + 1e-6);
    for (Tensor& g : grads) g.mul_(scale);
  }
  return full({}, norm, TensorOptions(DType::Float64));
}

double cosine_lr(int64_t it, double lr, double min_lr, int64_t warmup_iters, int64_t decay_iters) {
  if (it < warmup_iters) return lr * double(it + 1) / double(warmup_iters + 1);
  if (it > decay_iters) return min_lr;
  double ratio = double(it - warmup_iters) / double(std::max<int64_t>(1, decay_iters - warmup_iters));
  double coeff = 0.5 * (1.0 + std::cos(M_PI * ratio));
  return min_lr + coeff * (lr - min_lr);
}

namespace {
void check_state(const nn::StateDict& state, const std::string& name, const Tensor& like) {
  for (auto& [n, t] : state)
    if (n == name) {
      EMBER_CHECK(t.sizes() == like.sizes() && t.dtype() == like.dtype(),
                  "optimizer load_state_dict: '", name, "' has shape ", t.shape_str(), " ",
                  dtype_name(t.dtype()), ", expected ", like.shape_str(), " ",
                  dtype_name(like.dtype()));
      return;
    }
  EMBER_FAIL("optimizer load_state_dict: missing '", name, "'");
}
const Tensor& find(const nn::StateDict& state, const std::string& name) {
  for (auto& [n, t] : state)
    if (n == name) return t;
  EMBER_FAIL("optimizer load_state_dict: missing '", name, "'");
}
std::string key(size_t g, size_t i, const char* slot) {
  return std::to_string(g) + "." + std::to_string(i) + "." + slot;
}
}  // namespace

AdamW::AdamW(std::vector<ParamGroup> groups, double lr, double b1, double b2, double e)
    : Optimizer(std::move(groups), lr), beta1(b1), beta2(b2), eps(e) {
  for (const ParamGroup& g : groups_) {
    exp_avg_.emplace_back();
    exp_avg_sq_.emplace_back();
    for (const Tensor& p : g.params) {
      exp_avg_.back().push_back(zeros_like(p));
      exp_avg_sq_.back().push_back(zeros_like(p));
    }
  }
}

nn::StateDict AdamW::state_dict() const {
  nn::StateDict s;
  s.emplace_back("step", scalar_tensor(double(step_), DType::Int64));
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      s.emplace_back(key(g, i, "exp_avg"), exp_avg_[g][i]);
      s.emplace_back(key(g, i, "exp_avg_sq"), exp_avg_sq_[g][i]);
    }
  return s;
}

void AdamW::load_state_dict(const nn::StateDict& state) {
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      check_state(state, key(g, i, "exp_avg"), exp_avg_[g][i]);
      check_state(state, key(g, i, "exp_avg_sq"), exp_avg_sq_[g][i]);
    }
  int64_t step = int64_t(find(state, "step").item());
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      exp_avg_[g][i].copy_(find(state, key(g, i, "exp_avg")));
      exp_avg_sq_[g][i].copy_(find(state, key(g, i, "exp_avg_sq")));
    }
  step_ = step;
}

SGD::SGD(std::vector<ParamGroup> groups, double lr, double mom)
    : Optimizer(std::move(groups), lr), momentum(mom) {
  for (const ParamGroup& g : groups_) buf_.emplace_back(g.params.size());
}

void SGD::step() {
  NoGradGuard no_grad;
  ++step_;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ParamGroup& g = groups_[gi];
    for (size_t i = 0; i < g.params.size(); ++i) {
      Tensor& p = g.params[i];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (g.weight_decay != 0) grad = grad + p * g.weight_decay;
      if (momentum != 0) {
        Tensor& b = buf_[gi][i];
        if (!b.defined()) b = grad.clone();
        else b.mul_(momentum).add_(grad);
        grad = b;
      }
      p.sub_(grad * g.lr.value_or(lr_));
    }
  }
}

nn::StateDict SGD::state_dict() const {
  nn::StateDict s;
  s.emplace_back("step", scalar_tensor(double(step_), DType::Int64));
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i)
      if (buf_[g][i].defined()) s.emplace_back(key(g, i, "momentum_buffer"), buf_[g][i]);
  return s;
}

void SGD::load_state_dict(const nn::StateDict& state) {
  int64_t step = int64_t(find(state, "step").item());
  std::vector<std::vector<Tensor>> bufs = buf_;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      std::string k = key(g, i, "momentum_buffer");
      for (auto& [n, t] : state)
        if (n == k) {
          EMBER_CHECK(t.sizes() == groups_[g].params[i].sizes(), "SGD load_state_dict: '", k,
                      "' has shape ", t.shape_str());
          bufs[g][i] = t.clone();
        }
    }
  buf_ = bufs;
  step_ = step;
}

}  // namespace ember::optim
