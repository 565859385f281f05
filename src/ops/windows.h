// Sliding windows over the two trailing dims of [..., H, W], shared by the convolution and
// pooling composites: their {height, width} arguments, output sizes, and one strided slice of
// the (padded) input a kernel offset, which is im2col written with views.
#pragma once
#include <array>
#include <vector>

#include "ember/tensor.h"

namespace ember {

using HW = std::array<int64_t, 2>;

// A kernel size, stride, padding or dilation given as one value (both dims) or {h, w}, checked
// to be at least `min`; the Error names op and what.
HW hw_arg(const std::vector<int64_t>& v, int64_t min, const char* op, const char* what);

struct WindowSpec {
  HW kernel, stride, padding, dilation;
};

// Windows along the two trailing dims of x (sizes before padding): {Ho, Wo}, or an Error naming
// op when the dilated kernel is larger than the padded input.
HW window_output(const Tensor& x, const WindowSpec& w, const char* op);

// The kernel's kH * kW offsets (row-major) of the already padded xp: views [..., Ho, Wo] whose
// element (i, j) is the one at that offset of window (i, j). Strided slices, so differentiable.
std::vector<Tensor> window_slices(const Tensor& xp, const WindowSpec& w, HW out);

}  // namespace ember
