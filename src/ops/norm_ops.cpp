// Layer norm: shape rule, grad and front end.
#include <algorithm>

#include "kernels/cpu/rowwise.h"
#include "ops/frontend.h"

namespace ember {

namespace {
MetaList infer_layer_norm(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  Shape stats = x.sizes();
  std::fill(stats.end() - int64_t(a.shape.size()), stats.end(), 1);
  DType s = stats_dtype(x.dtype());
  return {TensorMeta{x.sizes(), {}, 0, x.dtype()}, TensorMeta{stats, {}, 0, s},
          TensorMeta{stats, {}, 0, s}};
}

// With xhat = (x - mean) * rstd and y = xhat * w + b, gw = g * w:
//   dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))   (means over the normalized dims)
//   dw = sum(g * xhat), db = sum(g)                          (sums over the leading dims)
// The grads of the mean and rstd outputs are not propagated (they are statistics, not results).
std::vector<Tensor> grad_layer_norm(const GradCtx& c) {
  const size_t nin = c.input_meta.size();
  std::vector<Tensor> grads(nin);
  const Tensor& g = c.grads[0];
  if (!g.defined()) return grads;
  const Tensor& x = c.inputs[0];
  const int64_t nd = x.dim(), k = int64_t(c.attrs.shape.size());
  Shape norm_dims, lead_dims;
  for (int64_t d = 0; d < nd; ++d) (d < nd - k ? lead_dims : norm_dims).push_back(d);
  if (nin > 1 && x.device().type != DeviceType::CPU && c.inputs[1].dtype() == x.dtype()) {
    // On a GPU: one op for dx, dw and db (the composite below is a dozen).
    Attrs a;
    a.shape = c.attrs.shape;
    a.value = c.attrs.value;
    std::vector<Tensor> r =
        dispatch(OpId::layer_norm_backward, {g, x, c.outputs[1], c.outputs[2], c.inputs[1]}, a);
    for (size_t i = 0; i < nin; ++i)
      if (c.needs_grad[i]) grads[i] = r[i];
    return grads;
  }
  const Tensor xhat = (x - c.outputs[1]) * c.outputs[2];
  if (c.needs_grad[0]) {
    Tensor gw = nin > 1 ? g * c.inputs[1] : g;
    Tensor centered = gw - gw.mean(norm_dims, true) - xhat * (gw * xhat).mean(norm_dims, true);
    grads[0] = c.outputs[2] * centered;
  }
  auto sum_lead = [&](const Tensor& t) { return lead_dims.empty() ? t : t.sum(lead_dims); };
  if (nin > 1 && c.needs_grad[1]) grads[1] = sum_lead(g * xhat);
  if (nin > 2 && c.needs_grad[2]) grads[2] = sum_lead(g);
  return grads;
}

void check_affine(const Tensor& t, const Shape& normalized_shape, const char* what) {
  EMBER_CHECK(t.sizes() == normalized_shape, "layer_norm: ", what, " of shape ", t.shape_str(),
              " does not match normalized_shape ", shape_str(normalized_shape));
  EMBER_CHECK(is_floating(t.dtype()), "layer_norm: ", what, " must be floating point, got ",
              dtype_name(t.dtype()));
}
}  // namespace

const OpImpl op_impl_layer_norm{infer_layer_norm, cpu::layer_norm, grad_layer_norm, 0b011, 0b110};

namespace {
MetaList infer_layer_norm_backward(std::span<const Tensor> in, const Attrs&) {
  const Tensor &x = in[1], &w = in[4];
  return {TensorMeta{x.sizes(), {}, 0, x.dtype()}, TensorMeta{w.sizes(), {}, 0, x.dtype()},
          TensorMeta{w.sizes(), {}, 0, x.dtype()}};
}
}  // namespace

const OpImpl op_impl_layer_norm_backward{infer_layer_norm_backward, cpu::layer_norm_backward,
                                         nullptr};

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  EMBER_CHECK(x_in.defined(), "layer_norm: undefined input");
  const Tensor x = autocast_float32(x_in);
  const int64_t k = int64_t(normalized_shape.size());
  EMBER_CHECK(k >= 1, "layer_norm: normalized_shape must name at least one dim, got []");
  EMBER_CHECK(k <= x.dim() &&
                  std::equal(normalized_shape.begin(), normalized_shape.end(), x.sizes().end() - k),
              "layer_norm: normalized_shape ", shape_str(normalized_shape),
              " must match the trailing dims of the input, which has shape ", x.shape_str());
  EMBER_CHECK(is_floating(x.dtype()), "layer_norm: input must be floating point, got ",
              dtype_name(x.dtype()), "; convert it with .to()");
  std::vector<Tensor> inputs = {x};
  if (weight.defined() || bias.defined()) {
    if (weight.defined()) check_affine(weight, normalized_shape, "weight");
    TensorOptions o(x.dtype());
    o.device = x.device();
    inputs.push_back(weight.defined() ? cast_to(weight, x.dtype()) : ones(normalized_shape, o));
  }
  if (bias.defined()) {
    check_affine(bias, normalized_shape, "bias");
    inputs.push_back(cast_to(bias, x.dtype()));
  }
  Attrs a;
  a.shape = normalized_shape;
  a.value = eps;
  return dispatch(OpId::layer_norm, std::move(inputs), a)[0];
}

// RMSNorm as a composite (mean of squares, rsqrt, products), in float32 under autocast as
// layer_norm is.
Tensor rms_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight,
                std::optional<double> eps) {
  EMBER_CHECK(x_in.defined(), "rms_norm: undefined input");
  const Tensor x = autocast_float32(x_in);
  const int64_t k = int64_t(normalized_shape.size());
  EMBER_CHECK(k >= 1 && k <= x.dim() &&
                  std::equal(normalized_shape.begin(), normalized_shape.end(), x.sizes().end() - k),
              "rms_norm: normalized_shape ", shape_str(normalized_shape),
              " must name trailing dims of the input, which has shape ", x.shape_str());
  EMBER_CHECK(is_floating(x.dtype()), "rms_norm: input must be floating point, got ",
              dtype_name(x.dtype()), "; convert it with .to()");
  Shape dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  // PyTorch's default: the gap between 1 and the next value of x's dtype.
  const double machine_eps = x.dtype() == DType::Float64   ? 2.220446049250313e-16
                             : x.dtype() == DType::Float16  ? 9.765625e-4
                             : x.dtype() == DType::BFloat16 ? 7.8125e-3
                                                            : 1.1920928955078125e-7;
  Tensor y = x * ((x * x).mean(dims, true) + (eps ? *eps : machine_eps)).rsqrt();
  if (!weight.defined()) return y;
  EMBER_CHECK(weight.sizes() == normalized_shape && is_floating(weight.dtype()),
              "rms_norm: the weight (shape ", weight.shape_str(), ", ", dtype_name(weight.dtype()),
              ") must be a floating tensor of shape normalized_shape ",
              shape_str(normalized_shape));
  return y * cast_to(weight, x.dtype());
}

}  // namespace ember
