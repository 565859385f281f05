// conv2d and conv1d as composites: im2col written with views (zero padding, then one strided
// slice of the padded input a kernel offset, stacked into columns) and one batched matmul over
// the groups, so autograd, capture and every device get them from the table ops.
#include "ops/frontend.h"
#include "ops/windows.h"

namespace ember {

namespace {

// Ranks, channels, groups, dtypes and bias of a convolution over `spatial` dims: x [N, C, ...]
// or [C, ...], weight [O, C / groups, ...], bias [O].
void check_conv(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t groups,
                int64_t spatial, const char* op) {
  EMBER_CHECK(x.defined() && weight.defined(), op, ": undefined tensor argument");
  const char* dims = spatial == 2 ? "H, W" : "L";
  EMBER_CHECK(x.dim() == spatial + 1 || x.dim() == spatial + 2, op, ": the input must be [N, C, ",
              dims, "] or [C, ", dims, "], got shape ", x.shape_str());
  EMBER_CHECK(weight.dim() == spatial + 2, op, ": the weight must be [out_channels, ",
              "in_channels / groups, ", spatial == 2 ? "kH, kW" : "k", "], got shape ",
              weight.shape_str());
  const int64_t C = x.size(-spatial - 1), O = weight.size(0);
  EMBER_CHECK(groups >= 1 && C % groups == 0 && O % groups == 0, op, ": groups = ", groups,
              " must divide both the input channels (", C, ", input of shape ", x.shape_str(),
              ") and the output channels (", O, ", weight of shape ", weight.shape_str(), ")");
  EMBER_CHECK(weight.size(1) * groups == C, op, ": a weight of shape ", weight.shape_str(),
              " with groups = ", groups, " takes ", weight.size(1) * groups,
              " input channels, but the input of shape ", x.shape_str(), " has ", C);
  EMBER_CHECK(is_floating(x.dtype()) && is_floating(weight.dtype()), op, ": the input (",
              dtype_name(x.dtype()), ") and the weight (", dtype_name(weight.dtype()),
              ") must be floating point; convert them with .to()");
  if (bias.defined())
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == O, op, ": the bias must have shape [", O,
                "] (a value an output channel), got ", bias.shape_str());
}

// The convolution of checked x [N, C, H, W] and weight [O, C/G, kH, kW]: columns
// [N, G, C/G * kH * kW, Ho * Wo] (channel-major, then the kernel offsets, as the weight
// flattens) times the weight as [G, O/G, C/G * kH * kW], one batched matmul.
Tensor conv_nchw(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias,
                 const WindowSpec& w, int64_t groups, const char* op) {
  const Tensor x = autocast_lower(x_in), weight = autocast_lower(weight_in);
  const HW out = window_output(x, w, op);
  const Tensor xp =
      w.padding == HW{0, 0} ? x : pad(x, {w.padding[1], w.padding[1], w.padding[0], w.padding[0]});
  const int64_t N = x.size(0), C = x.size(1), O = weight.size(0), G = groups;
  const int64_t K = C / G * w.kernel[0] * w.kernel[1], L = out[0] * out[1];
  const Tensor cols = stack(window_slices(xp, w, out), 2).reshape({N, G, K, L});
  const Tensor y = matmul(weight.reshape({G, O / G, K}), cols).reshape({N, O, out[0], out[1]});
  return bias.defined() ? y + autocast_lower(bias).view({1, O, 1, 1}) : y;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
              const std::vector<int64_t>& dilation, int64_t groups) {
  check_conv(x, weight, bias, groups, 2, "conv2d");
  const WindowSpec w{{weight.size(2), weight.size(3)},
                     hw_arg(stride, 1, "conv2d", "stride"),
                     hw_arg(padding, 0, "conv2d", "padding"),
                     hw_arg(dilation, 1, "conv2d", "dilation")};
  if (x.dim() == 3) return conv_nchw(x.unsqueeze(0), weight, bias, w, groups, "conv2d").squeeze(0);
  return conv_nchw(x, weight, bias, w, groups, "conv2d");
}

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
              int64_t padding, int64_t dilation, int64_t groups) {
  check_conv(x, weight, bias, groups, 1, "conv1d");
  EMBER_CHECK(stride >= 1 && padding >= 0 && dilation >= 1, "conv1d: stride (", stride,
              ") and dilation (", dilation, ") must be at least 1 and padding (", padding,
              ") at least 0");
  const int64_t k = weight.size(2), span = dilation * (k - 1) + 1, L = x.size(-1);
  EMBER_CHECK(span <= L + 2 * padding, "conv1d: the kernel (", k, ", dilation ", dilation,
              ") is larger than the padded input (", L + 2 * padding, ") of shape ", x.shape_str(),
              "; use a smaller kernel or more padding");
  // The windows of conv2d with a height of 1.
  const WindowSpec w{{1, k}, {1, stride}, {0, padding}, {1, dilation}};
  const Tensor x4 = x.dim() == 2 ? x.unsqueeze(0).unsqueeze(2) : x.unsqueeze(2);
  const Tensor y = conv_nchw(x4, weight.unsqueeze(2), bias, w, groups, "conv1d").squeeze(2);
  return x.dim() == 2 ? y.squeeze(0) : y;
}

}  // namespace ember
