// AdamW's step: one definition of the update, run eagerly or (AdamW::set_compiled) as one
// compiled function over all parameters. The step-dependent scalars are 0-dim tensors of the
// parameters' dtype (the values eager's scalar arguments would round to), so a captured graph
// stays valid from step to step.
#include <algorithm>
#include <cmath>

#include "ember/autograd.h"
#include "ember/compile.h"
#include "ember/ops.h"
#include "ember/optim.h"
#include "kernels/multi_tensor.h"

namespace ember::optim {

namespace {

using Tensors = std::vector<Tensor>;

Tensor scalar_on(double v, DType dtype, Device device) {
  TensorOptions o(dtype);
  o.device = device;
  return full({}, v, o);
}

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

void AdamW::step() {
  NoGradGuard no_grad;
  ++step_;
  const double bc1 = 1 - std::pow(beta1, double(step_));
  const double bc2 = 1 - std::pow(beta2, double(step_));
  // The parameters with grads, by dtype, device and learning rate: each batch's scalars are
  // tensors of that dtype on that device, its step size that of its rate.
  struct Batch {
    DType dtype;
    Device device;
    double lr;
    Tensors ps, gs, ms, vs;
    std::vector<double> decay;  // 1 - lr * weight_decay of each parameter's group
  };
  std::vector<Batch> batches;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    const double lr = g.lr.value_or(lr_);
    for (size_t i = 0; i < g.params.size(); ++i) {
      const Tensor& p = g.params[i];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      auto b = std::find_if(batches.begin(), batches.end(), [&](const Batch& x) {
        return x.dtype == p.dtype() && x.device == p.device() && x.lr == lr;
      });
      if (b == batches.end())
        b = batches.insert(batches.end(), Batch{p.dtype(), p.device(), lr, {}, {}, {}, {}, {}});
      b->ps.push_back(p);
      b->gs.push_back(grad);
      b->ms.push_back(exp_avg_[gi][i]);
      b->vs.push_back(exp_avg_sq_[gi][i]);
      // 1 without decay: p * 1 is p exactly.
      b->decay.push_back(1 - lr * g.weight_decay);
    }
  }
  for (const Batch& b : batches) {
    if (multi_tensor::takes(b.ps) && multi_tensor::takes(b.gs) &&
        multi_tensor::takes(b.ms) && multi_tensor::takes(b.vs)) {
      // On a GPU: the same update, every parameter in one launch (or a few), compiled or not.
      std::vector<float> decay(b.decay.begin(), b.decay.end());
      multi_tensor::adamw_step(b.ps, b.gs, b.ms, b.vs, decay,
                               {float(beta1), float(1 - beta1), float(beta2), float(1 - beta2),
                                float(bc2), float(eps), float(b.lr / bc1)});
      continue;
    }
    auto s = [&](double v) { return scalar_on(v, b.dtype, b.device); };
    Tensors decay;
    for (double d : b.decay) decay.push_back(s(d));
    if (compiled_ && batches.size() == 1)
      compiled_->fn(b.ps, b.gs, b.ms, b.vs, decay, s(beta1), s(1 - beta1), s(beta2),
                    s(1 - beta2), s(bc2), s(eps), s(b.lr / bc1));
    else  // eager, or parameters of several dtypes or learning rates
      adamw_update(b.ps, b.gs, b.ms, b.vs, decay, s(beta1), s(1 - beta1), s(beta2),
                   s(1 - beta2), s(bc2), s(eps), s(b.lr / bc1));
  }
}

}  // namespace ember::optim
