// Sliding-window helpers of the convolution and pooling composites (see windows.h).
#include "ops/windows.h"

#include "core/shape.h"

namespace ember {

HW hw_arg(const std::vector<int64_t>& v, int64_t min, const char* op, const char* what) {
  EMBER_CHECK(v.size() == 1 || v.size() == 2, op, ": ", what, " takes one value or two ",
              "(height, width), got ", v.size());
  const HW r{v[0], v.back()};
  EMBER_CHECK(r[0] >= min && r[1] >= min, op, ": ", what, " must be at least ", min, ", got ",
              shape_str(Shape(v.begin(), v.end())));
  return r;
}

HW window_output(const Tensor& x, const WindowSpec& w, const char* op) {
  HW out{};
  for (int k = 0; k < 2; ++k) {
    const int64_t in = x.size(x.dim() - 2 + k) + 2 * w.padding[size_t(k)];
    const int64_t span = w.dilation[size_t(k)] * (w.kernel[size_t(k)] - 1) + 1;
    EMBER_CHECK(span <= in, op, ": the kernel (", w.kernel[0], " x ", w.kernel[1], ", dilation ",
                w.dilation[0], " x ", w.dilation[1], ") is larger than the padded input (",
                x.size(-2) + 2 * w.padding[0], " x ", x.size(-1) + 2 * w.padding[1], ") of shape ",
                x.shape_str(), "; use a smaller kernel or more padding");
    out[size_t(k)] = (in - span) / w.stride[size_t(k)] + 1;
  }
  return out;
}

std::vector<Tensor> window_slices(const Tensor& xp, const WindowSpec& w, HW out) {
  std::vector<Tensor> parts;
  parts.reserve(size_t(w.kernel[0] * w.kernel[1]));
  const int64_t sh = w.stride[0], sw = w.stride[1];
  for (int64_t i = 0; i < w.kernel[0]; ++i) {
    const int64_t h0 = i * w.dilation[0];
    const Tensor rows = xp.slice(-2, h0, h0 + (out[0] - 1) * sh + 1, sh);
    for (int64_t j = 0; j < w.kernel[1]; ++j) {
      const int64_t w0 = j * w.dilation[1];
      parts.push_back(rows.slice(-1, w0, w0 + (out[1] - 1) * sw + 1, sw));
    }
  }
  return parts;
}

}  // namespace ember
