// GradScaler (ember/optim.h): loss scaling for float16 training.
#include <cmath>

#include "ember/autograd.h"
#include "ember/ops.h"
#include "ember/optim.h"
#include "optim/device_sums.h"

namespace ember::optim {

GradScaler::GradScaler(double init_scale, double growth_factor, double backoff_factor,
                       int64_t growth_interval, bool enabled)
    : scale_(enabled ? init_scale : 1.0),
      growth_(growth_factor),
      backoff_(backoff_factor),
      interval_(growth_interval),
      enabled_(enabled) {
  EMBER_CHECK(init_scale > 0 && std::isfinite(init_scale), "GradScaler: init_scale must be a "
              "positive finite number, got ", init_scale);
  EMBER_CHECK(growth_factor > 1, "GradScaler: growth_factor must be above 1, got ", growth_factor);
  EMBER_CHECK(backoff_factor > 0 && backoff_factor < 1,
              "GradScaler: backoff_factor must be in (0, 1), got ", backoff_factor);
  EMBER_CHECK(growth_interval > 0, "GradScaler: growth_interval must be positive, got ",
              growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  EMBER_CHECK(loss.defined(), "GradScaler::scale: undefined loss");
  if (!enabled_) return loss;
  return loss * scale_;
}

void GradScaler::unscale_(Optimizer& opt) {
  EMBER_CHECK(!unscaled_, "GradScaler::unscale_: already called since the last update(); call "
              "it once per step");
  unscaled_ = true;
  found_inf_ = false;
  if (!enabled_) return;
  NoGradGuard no_grad;
  const double inv = 1.0 / scale_;
  // grad * 0 is 0 for finite grads and NaN otherwise: their sum tells them apart.
  DeviceSums probes;
  for (ParamGroup& g : opt.groups())
    for (Tensor& p : g.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      grad.mul_(inv);
      probes.add((grad * 0.0).sum().to(DType::Float64));
    }
  found_inf_ = !std::isfinite(probes.total());
}

bool GradScaler::step(Optimizer& opt) {
  if (!unscaled_) unscale_(opt);
  if (found_inf_) {
    ++skipped_;
    return false;
  }
  opt.step();
  return true;
}

void GradScaler::update() {
  EMBER_CHECK(unscaled_, "GradScaler::update: no step since the last update(); call step() first");
  unscaled_ = false;
  if (!enabled_) return;
  if (found_inf_) {
    scale_ *= backoff_;
    good_steps_ = 0;
  } else if (++good_steps_ == interval_) {
    scale_ *= growth_;
    good_steps_ = 0;
  }
  found_inf_ = false;
}

}  // namespace ember::optim
