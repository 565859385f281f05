// Batch norm and group norm as composites (means, variances, rsqrt, products), in float32 under
// autocast as layer_norm is. Both normalize [N, C, ...] and scale and shift per channel.
#include "ops/frontend.h"

namespace ember {

namespace {

void check_input(const Tensor& x, const char* op) {
  EMBER_CHECK(x.dim() >= 2, op, ": the input must be [N, C, ...] (at least 2-D), got shape ",
              x.shape_str());
  EMBER_CHECK(is_floating(x.dtype()), op, ": the input must be floating point, got ",
              dtype_name(x.dtype()), "; convert it with .to()");
}

// t (a [C] tensor) as [1, C, 1, ...] in x's dtype, to broadcast over x.
Tensor per_channel(const Tensor& t, const Tensor& x, const char* op, const char* what) {
  const int64_t C = x.size(1);
  EMBER_CHECK(t.dim() == 1 && t.size(0) == C && is_floating(t.dtype()), op, ": ", what, " (shape ",
              t.shape_str(), ", ", dtype_name(t.dtype()), ") must be a floating tensor of shape [",
              C, "], one value for each channel of the input of shape ", x.shape_str());
  Shape s(size_t(x.dim()), 1);
  s[1] = C;
  return cast_to(t, x.dtype()).view(s);
}

Tensor affine(Tensor y, const Tensor& x, const Tensor& weight, const Tensor& bias, const char* op) {
  if (weight.defined()) y = y * per_channel(weight, x, op, "weight");
  if (bias.defined()) y = y + per_channel(bias, x, op, "bias");
  return y;
}

}  // namespace

Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  EMBER_CHECK(x_in.defined(), "batch_norm: undefined input");
  const Tensor x = autocast_float32(x_in);
  check_input(x, "batch_norm");
  EMBER_CHECK(running_mean.defined() == running_var.defined(), "batch_norm: give both ",
              "running_mean and running_var, or neither");
  EMBER_CHECK(training || running_mean.defined(), "batch_norm: out of training the running ",
              "stats normalize the input; give running_mean and running_var, or training = true");
  const int64_t C = x.size(1);
  Tensor mean, var;
  if (running_mean.defined()) {
    mean = per_channel(running_mean, x, "batch_norm", "running_mean");
    var = per_channel(running_var, x, "batch_norm", "running_var");
  }
  if (training) {
    Shape dims = {0};
    for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
    const int64_t n = C ? x.numel() / C : 0;
    EMBER_CHECK(n > 1, "batch_norm: training needs more than one value per channel, got an ",
                "input of shape ", x.shape_str());
    mean = x.mean(dims, true);
    var = x.var(dims, 0, true);
    if (running_mean.defined()) {
      // PyTorch's update: the unbiased variance, outside autograd.
      NoGradGuard no_grad;
      Tensor rm = running_mean, rv = running_var;
      rm.mul_(1 - momentum).add_(cast_to(mean.detach().view({C}), rm.dtype()) * momentum);
      rv.mul_(1 - momentum)
          .add_(cast_to(var.detach().view({C}), rv.dtype()) *
                (momentum * double(n) / double(n - 1)));
    }
  }
  return affine((x - mean) * (var + eps).rsqrt(), x, weight, bias, "batch_norm");
}

Tensor group_norm(const Tensor& x_in, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  double eps) {
  EMBER_CHECK(x_in.defined(), "group_norm: undefined input");
  const Tensor x = autocast_float32(x_in);
  check_input(x, "group_norm");
  const int64_t N = x.size(0), C = x.size(1);
  EMBER_CHECK(num_groups >= 1 && C % num_groups == 0, "group_norm: num_groups = ", num_groups,
              " must divide the ", C, " channels of the input of shape ", x.shape_str());
  // Each group as one row: its channels and every dim after them.
  const Tensor rows = x.reshape({N, num_groups, N ? x.numel() / N / num_groups : 0});
  const Tensor mean = rows.mean({2}, true), var = rows.var({2}, 0, true);
  const Tensor y = ((rows - mean) * (var + eps).rsqrt()).reshape(x.sizes());
  return affine(y, x, weight, bias, "group_norm");
}

}  // namespace ember
