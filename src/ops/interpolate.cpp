// interpolate as a composite: each of H and W is resized on its own (both modes are separable)
// by index_select of source rows, blended with weights for bilinear. The source indices and
// weights follow PyTorch's rules and are computed with tensor ops on x's device, in the
// precision PyTorch computes them in.
#include "ops/frontend.h"

namespace ember {

namespace {

// x resized along dim d from n to m elements; bilinear takes x in float32 or float64.
Tensor resize_dim(const Tensor& x, int64_t d, int64_t m, bool bilinear, bool align_corners) {
  const int64_t n = x.size(d);
  if (n == m && !bilinear) return x;
  // Source positions in float32, or float64 for a bilinear float64 input (PyTorch's nearest
  // mode computes in float32 for every dtype).
  const DType acc = bilinear && x.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  TensorOptions o(acc);
  o.device = x.device();
  const Tensor dst = arange(0, double(m), 1, o);
  if (!bilinear) {
    // floor(dst * scale) with scale = n / m rounded to float, clamped to the last row.
    const double scale = double(float(n) / float(m));
    return x.index_select(d, (dst * scale).clamp(std::nullopt, double(n - 1)).to(DType::Int64));
  }
  Tensor src;
  if (align_corners) {
    src = dst * (m > 1 ? double(n - 1) / double(m - 1) : 0.0);
  } else {
    const double scale =
        acc == DType::Float64 ? double(n) / double(m) : double(float(n) / float(m));
    src = ((dst + 0.5) * scale - 0.5).clamp(0.0, std::nullopt);
  }
  // Rows i0 = floor(src) and i1 = min(i0 + 1, n - 1), weighted by 1 - frac and frac.
  const Tensor i0 = src.to(DType::Int64);
  const Tensor i1 = (i0 + 1).clamp(std::nullopt, double(n - 1));
  Shape along(size_t(x.dim()), 1);
  along[size_t(d)] = m;
  const Tensor frac = (src - i0.to(acc)).view(along);
  return x.index_select(d, i0) * (1.0 - frac) + x.index_select(d, i1) * frac;
}

}  // namespace

Tensor interpolate(const Tensor& x, const std::vector<int64_t>& size, const std::string& mode,
                   bool align_corners) {
  EMBER_CHECK(x.defined(), "interpolate: undefined tensor argument");
  EMBER_CHECK(x.dim() == 4, "interpolate: the input must be [N, C, H, W], got shape ",
              x.shape_str());
  EMBER_CHECK(mode == "nearest" || mode == "bilinear", "interpolate: mode \"", mode,
              "\" is not supported; use \"nearest\" or \"bilinear\"");
  const bool bilinear = mode == "bilinear";
  EMBER_CHECK(bilinear || !align_corners, "interpolate: align_corners only applies to ",
              "\"bilinear\"; leave it false for \"nearest\"");
  EMBER_CHECK(is_floating(x.dtype()) || !bilinear, "interpolate: \"bilinear\" needs a ",
              "floating input, got ", dtype_name(x.dtype()), "; convert it with .to()");
  EMBER_CHECK(size.size() == 1 || size.size() == 2, "interpolate: size takes one value or two ",
              "(height, width), got ", size.size());
  const int64_t oh = size[0], ow = size.back();
  EMBER_CHECK(oh >= 1 && ow >= 1, "interpolate: the output size must be positive, got ", oh, " x ",
              ow);
  EMBER_CHECK(x.size(2) >= 1 && x.size(3) >= 1, "interpolate: the input of shape ", x.shape_str(),
              " has an empty H or W");
  if (!bilinear) return resize_dim(resize_dim(x, 2, oh, false, false), 3, ow, false, false);
  // Blended in float32 (float64 for float64 inputs) and rounded once, as PyTorch's kernels do.
  const Tensor xa = cast_to(x, x.dtype() == DType::Float64 ? DType::Float64 : DType::Float32);
  const Tensor y =
      resize_dim(resize_dim(xa, 2, oh, true, align_corners), 3, ow, true, align_corners);
  return cast_to(y, x.dtype());
}

}  // namespace ember
