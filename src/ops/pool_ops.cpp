// Pooling as composites over the trailing [H, W] of [N, C, H, W] or [C, H, W]: max and average
// pooling reduce the stacked window slices (windows.h); adaptive average pooling is a product
// with averaging matrices (one row a window), one along H and one along W.
#include <limits>

#include "ops/frontend.h"
#include "ops/windows.h"

namespace ember {

namespace {

// The windows of a pooling op: ranks and dtype checked, stride defaulting to the kernel, and
// padding at most half the kernel (as PyTorch's).
WindowSpec pool_windows(const Tensor& x, const std::vector<int64_t>& kernel_size,
                        const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                        const std::vector<int64_t>& dilation, const char* op) {
  EMBER_CHECK(x.defined(), op, ": undefined tensor argument");
  EMBER_CHECK(x.dim() == 3 || x.dim() == 4, op, ": the input must be [N, C, H, W] or [C, H, W], ",
              "got shape ", x.shape_str());
  EMBER_CHECK(is_floating(x.dtype()), op, ": the input must be floating point, got ",
              dtype_name(x.dtype()), "; convert it with .to()");
  WindowSpec w;
  w.kernel = hw_arg(kernel_size, 1, op, "kernel_size");
  w.stride = stride.empty() ? w.kernel : hw_arg(stride, 1, op, "stride");
  w.padding = hw_arg(padding, 0, op, "padding");
  w.dilation = hw_arg(dilation, 1, op, "dilation");
  EMBER_CHECK(w.padding[0] <= w.kernel[0] / 2 && w.padding[1] <= w.kernel[1] / 2, op, ": padding (",
              w.padding[0], ", ", w.padding[1], ") must be at most half the kernel (", w.kernel[0],
              ", ", w.kernel[1], ")");
  return w;
}

// x with the windows' padding on both sides of H and W, filled with value.
Tensor pad_hw(const Tensor& x, const WindowSpec& w, double value) {
  if (w.padding == HW{0, 0}) return x;
  return pad(x, {w.padding[1], w.padding[1], w.padding[0], w.padding[0]}, value);
}

// [out, in] matrix whose row i averages the inputs [floor(i in / out), ceil((i + 1) in / out)),
// in dtype on device: h is in window i when (h + 1) out > i in and h out < (i + 1) in.
Tensor averaging_matrix(int64_t in, int64_t out, DType dtype, Device device) {
  TensorOptions o(DType::Int64);
  o.device = device;
  const Tensor i = arange(out, o).unsqueeze(1), h = arange(in, o).unsqueeze(0);
  const Tensor inside = ((h + 1) * double(out))
                            .gt(i * double(in))
                            .logical_and((h * double(out)).lt((i + 1) * double(in)));
  const Tensor m = inside.to(dtype);
  return m / m.sum({1}, true);
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const std::vector<int64_t>& kernel_size,
                  const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                  const std::vector<int64_t>& dilation) {
  const WindowSpec w = pool_windows(x, kernel_size, stride, padding, dilation, "max_pool2d");
  const HW out = window_output(x, w, "max_pool2d");
  const Tensor xp = pad_hw(x, w, -std::numeric_limits<double>::infinity());
  return stack(window_slices(xp, w, out), x.dim()).amax({-1});
}

Tensor avg_pool2d(const Tensor& x, const std::vector<int64_t>& kernel_size,
                  const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                  bool count_include_pad) {
  const WindowSpec w = pool_windows(x, kernel_size, stride, padding, {1}, "avg_pool2d");
  const HW out = window_output(x, w, "avg_pool2d");
  const Tensor windows = stack(window_slices(pad_hw(x, w, 0), w, out), x.dim());
  if (count_include_pad || w.padding == HW{0, 0}) return windows.mean({-1});
  // The divisor: how many elements of each window lie inside the input, the same windows over
  // ones padded with zeros.
  TensorOptions o(x.dtype());
  o.device = x.device();
  const Tensor inside = pad_hw(ones({x.size(-2), x.size(-1)}, o), w, 0);
  const Tensor counts = stack(window_slices(inside, w, out), 2).sum({-1});
  return windows.sum({-1}) / counts;
}

Tensor adaptive_avg_pool2d(const Tensor& x, const std::vector<int64_t>& output_size) {
  EMBER_CHECK(x.defined(), "adaptive_avg_pool2d: undefined tensor argument");
  EMBER_CHECK(x.dim() == 3 || x.dim() == 4, "adaptive_avg_pool2d: the input must be [N, C, H, W] ",
              "or [C, H, W], got shape ", x.shape_str());
  EMBER_CHECK(is_floating(x.dtype()), "adaptive_avg_pool2d: the input must be floating point, ",
              "got ", dtype_name(x.dtype()), "; convert it with .to()");
  const HW out = hw_arg(output_size, 1, "adaptive_avg_pool2d", "output_size");
  const int64_t H = x.size(-2), W = x.size(-1);
  EMBER_CHECK(H >= 1 && W >= 1, "adaptive_avg_pool2d: the input of shape ", x.shape_str(),
              " has an empty H or W; there is nothing to average");
  if (H % out[0] == 0 && W % out[1] == 0) {
    // Windows that tile the input: a reshape and one mean.
    Shape s(x.sizes().begin(), x.sizes().end() - 2);
    s.insert(s.end(), {out[0], H / out[0], out[1], W / out[1]});
    return x.reshape(s).mean({-3, -1});
  }
  const Tensor rows = averaging_matrix(H, out[0], x.dtype(), x.device());
  const Tensor cols = averaging_matrix(W, out[1], x.dtype(), x.device());
  return matmul(matmul(rows, x), cols.t());
}

}  // namespace ember
