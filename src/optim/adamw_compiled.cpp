// AdamW's step as one compiled function over all parameters (AdamW::set_compiled): the same
// update as AdamW::step, with the step-dependent scalars passed as 0-dim tensors so the
// captured graph stays valid from step to step.
#include <cmath>

#include "ember/autograd.h"
#include "ember/compile.h"
#include "ember/ops.h"
#include "ember/optim.h"

namespace ember::optim {

namespace {

using Tensors = std::vector<Tensor>;

// One update of every parameter in ps (with grads gs, moments ms and vs). decay[i] is
// 1 - lr * weight_decay of the parameter's group (1 without decay: p * 1 is p exactly).
Tensors adamw_update(const Tensors& ps, const Tensors& gs, const Tensors& ms, const Tensors& vs,
                     const Tensors& decay, const Tensor& beta1, const Tensor& one_minus_beta1,
                     const Tensor& beta2, const Tensor& one_minus_beta2, const Tensor& bc2,
                     const Tensor& eps, const Tensor& step_size) {
  for (size_t i = 0; i < ps.size(); ++i) {
    Tensor p = ps[i], m = ms[i], v = vs[i];
    const Tensor& g = gs[i];
    p.mul_(decay[i]);
    m.mul_(beta1).add_(g * one_minus_beta1);
    v.mul_(beta2).add_(g * g * one_minus_beta2);
    Tensor denom = (v / bc2).sqrt() + eps;
    p.sub_(m / denom * step_size);
  }
  return {};
}

struct Update {
  Tensors operator()(const Tensors& ps, const Tensors& gs, const Tensors& ms, const Tensors& vs,
                     const Tensors& decay, const Tensor& b1, const Tensor& omb1, const Tensor& b2,
                     const Tensor& omb2, const Tensor& bc2, const Tensor& eps,
                     const Tensor& step) const {
    return adamw_update(ps, gs, ms, vs, decay, b1, omb1, b2, omb2, bc2, eps, step);
  }
};

}  // namespace

struct AdamW::Compiled {
  decltype(compile(Update{})) fn = compile(Update{}, [] {
    CompileOptions o;
    o.name = "AdamW.step";
    return o;
  }());
};

void AdamW::set_compiled(bool on) {
  compiled_ = on ? std::make_shared<Compiled>() : nullptr;
}

void AdamW::step_compiled(double bc1, double bc2) {
  Tensors ps, gs, ms, vs, decay;
  DType dtype = DType::Float32;
  bool mixed = false;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    for (size_t i = 0; i < g.params.size(); ++i) {
      const Tensor& p = g.params[i];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (ps.empty()) dtype = p.dtype();
      mixed |= p.dtype() != dtype || grad.dtype() != dtype;
      ps.push_back(p);
      gs.push_back(grad);
      ms.push_back(exp_avg_[gi][i]);
      vs.push_back(exp_avg_sq_[gi][i]);
      decay.push_back(scalar_tensor(1 - lr_ * g.weight_decay, dtype));
    }
  }
  if (ps.empty()) return;
  auto s = [dtype](double v) { return scalar_tensor(v, dtype); };
  if (mixed) {  // the scalars are in one dtype: step each parameter eagerly
    for (size_t i = 0; i < ps.size(); ++i) {
      auto t = [&](double v) { return scalar_tensor(v, ps[i].dtype()); };
      adamw_update({ps[i]}, {gs[i]}, {ms[i]}, {vs[i]},
                   {t(decay[i].item())}, t(beta1), t(1 - beta1), t(beta2), t(1 - beta2), t(bc2),
                   t(eps), t(lr_ / bc1));
    }
    return;
  }
  compiled_->fn(ps, gs, ms, vs, decay, s(beta1), s(1 - beta1), s(beta2), s(1 - beta2), s(bc2),
                s(eps), s(lr_ / bc1));
}

}  // namespace ember::optim
