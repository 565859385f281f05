// Optimizers (AdamW, SGD with momentum), gradient clipping and learning-rate schedules.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/nn.h"
#include "ember/tensor.h"

namespace ember::optim {

// Parameters that share a weight decay and, optionally, a learning rate of their own.
struct ParamGroup {
  ParamGroup() = default;
  // group_lr, when given, replaces the optimizer's rate for these parameters.
  ParamGroup(std::vector<Tensor> group_params, double group_weight_decay = 0.0,
             std::optional<double> group_lr = std::nullopt)
      : params(std::move(group_params)), weight_decay(group_weight_decay), lr(group_lr) {}
  std::vector<Tensor> params;
  double weight_decay = 0.0;
  // This group's learning rate; unset: the optimizer's (set_lr), which schedules change.
  std::optional<double> lr;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Updates every parameter from its .grad (parameters without grads are skipped).
  virtual void step() = 0;
  // Drops the .grad of every parameter.
  void zero_grad();
  // Sets the learning rate of the next steps (schedules call it each iteration), for the
  // groups without a rate of their own (ParamGroup::lr).
  void set_lr(double lr) { lr_ = lr; }
  // The learning rate of the next step, and the steps taken.
  double lr() const { return lr_; }
  int64_t steps() const { return step_; }
  // Optimizer state as named tensors ("<group>.<index>.<slot>") plus the step count, for
  // checkpoints; load_state_dict checks names, shapes and dtypes before changing anything.
  virtual nn::StateDict state_dict() const = 0;
  virtual void load_state_dict(const nn::StateDict& state) = 0;
  // The parameter groups (weight decay per group).
  std::vector<ParamGroup>& groups() { return groups_; }

 protected:
  Optimizer(std::vector<ParamGroup> groups, double lr);
  std::vector<ParamGroup> groups_;
  double lr_;
  int64_t step_ = 0;
};

// Adam with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW.
class AdamW : public Optimizer {
 public:
  // torch.optim.AdamW's defaults (weight decay set per group).
  AdamW(std::vector<ParamGroup> groups, double lr = 1e-3, double beta1 = 0.9,
        double beta2 = 0.999, double eps = 1e-8);
  // One AdamW update of every parameter that has a grad.
  void step() override;
  // Runs step() as one compiled function over every parameter (ember::compile, default
  // backend): the updates of all parameters fuse into generated kernels that write the
  // parameters and moments in place. The step-dependent scalars (learning rate, bias
  // corrections) are tensor inputs, so it compiles once per set of parameters that have
  // grads. Results agree with the eager step to rounding. Parameters of mixed dtypes, or of
  // groups with different learning rates, step eagerly; float32 parameters on a GPU take the
  // multi-tensor kernel either way (every parameter in one launch per 64, which is what
  // compiling would aim for). Off by default.
  void set_compiled(bool on);
  nn::StateDict state_dict() const override;
  void load_state_dict(const nn::StateDict& state) override;
  double beta1, beta2, eps;

 private:
  struct Compiled;
  std::vector<std::vector<Tensor>> exp_avg_, exp_avg_sq_;  // per group, per param
  std::shared_ptr<Compiled> compiled_;
};

class SGD : public Optimizer {
 public:
  // SGD with optional momentum (no dampening or Nesterov).
  SGD(std::vector<ParamGroup> groups, double lr, double momentum = 0.0);
  // One update of every parameter that has a grad.
  void step() override;
  // Momentum buffers as named tensors; load checks names, shapes and dtypes first (Error, and
  // nothing changed).
  nn::StateDict state_dict() const override;
  void load_state_dict(const nn::StateDict& state) override;
  double momentum;

 private:
  std::vector<std::vector<Tensor>> buf_;
};

// Dynamic loss scaling for float16 training, as torch.amp.GradScaler: the loss is multiplied
// by a large scale before backward so small grads survive float16, the grads are divided by it
// before the step, and a step whose grads hold an inf or NaN is skipped and the scale halved;
// after `growth_interval` good steps in a row the scale doubles.
//   scaler.scale(loss).backward(); scaler.unscale_(opt); clip_grad_norm_(...);
//   scaler.step(opt); scaler.update();
class GradScaler {
 public:
  // enabled = false makes every call a pass-through (scale 1, every step taken).
  explicit GradScaler(double init_scale = 65536.0, double growth_factor = 2.0,
                      double backoff_factor = 0.5, int64_t growth_interval = 2000,
                      bool enabled = true);
  // loss times the current scale.
  Tensor scale(const Tensor& loss) const;
  // Divides the grads of opt's parameters by the scale, in place, and records whether any is
  // inf or NaN (one read of the device per call). Once per step, before clipping.
  void unscale_(Optimizer& opt);
  // opt.step() unless this step's grads were not finite (unscaling them first when unscale_
  // was not called); returns whether the step was taken.
  bool step(Optimizer& opt);
  // Adjusts the scale after a step: backoff after a skipped one, growth after
  // growth_interval taken ones in a row.
  void update();
  // The current scale, and the steps skipped so far.
  double get_scale() const { return scale_; }
  int64_t skipped_steps() const { return skipped_; }

 private:
  double scale_, growth_, backoff_;
  int64_t interval_, good_steps_ = 0, skipped_ = 0;
  bool enabled_, unscaled_ = false, found_inf_ = false;
};

// nanoGPT's grouping: weight decay on tensors of 2+ dims (matmul weights, embeddings), none
// on biases and norm weights.
std::vector<ParamGroup> decay_groups(const nn::Module& m, double weight_decay);

// Scales all grads so their global L2 norm is at most max_norm; returns the norm before, as
// PyTorch does: a 0-dim float64 tensor (on the grads' GPU when they all live on one, so the
// step need not wait for the device; read it with item()).
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

// Linear warmup, then cosine decay from lr to min_lr until decay_iters (nanoGPT's schedule).
double cosine_lr(int64_t it, double lr, double min_lr, int64_t warmup_iters, int64_t decay_iters);

}  // namespace ember::optim
