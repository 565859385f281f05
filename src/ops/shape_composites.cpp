// Composites that move or pad elements: roll, pad, one_hot. Written with table ops (slices,
// cat, comparisons), so autograd, capture and every device get them as they are.
#include "ops/frontend.h"

namespace ember {

Tensor roll(const Tensor& x, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims) {
  EMBER_CHECK(x.defined(), "roll: undefined tensor argument");
  if (dims.empty()) {
    EMBER_CHECK(shifts.size() == 1, "roll: without dims, give one shift (got ", shifts.size(),
                ")");
    return roll(x.flatten(), shifts, {0}).view(x.sizes());
  }
  EMBER_CHECK(shifts.size() == dims.size(), "roll: ", shifts.size(), " shifts for ", dims.size(),
              " dims; give one shift a dim");
  Tensor y = x;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], x.dim(), "roll"), n = x.size(d);
    if (n == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;  // in [0, n)
    if (s == 0) continue;
    // The last s elements come first.
    y = cat({y.slice(d, n - s, n), y.slice(d, 0, n - s)}, d);
  }
  return y;
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value) {
  EMBER_CHECK(x.defined(), "pad: undefined tensor argument");
  EMBER_CHECK(pads.size() % 2 == 0 && int64_t(pads.size()) / 2 <= x.dim(), "pad: ", pads.size(),
              " amounts for a tensor of shape ", x.shape_str(),
              "; give a (left, right) pair for each of up to ", x.dim(), " trailing dims");
  Tensor y = x;
  for (size_t p = 0; p < pads.size() / 2; ++p) {
    const int64_t d = x.dim() - 1 - int64_t(p);
    const int64_t left = pads[2 * p], right = pads[2 * p + 1];
    EMBER_CHECK(y.size(d) + std::min<int64_t>(left, 0) + std::min<int64_t>(right, 0) >= 0,
                "pad: cropping ", -std::min<int64_t>(left, 0), " and ",
                -std::min<int64_t>(right, 0), " elements from dim ", d, " of size ", y.size(d));
    // Negative amounts crop first; positive ones add constant blocks.
    y = y.slice(d, std::max<int64_t>(-left, 0), y.size(d) - std::max<int64_t>(-right, 0));
    std::vector<Tensor> parts;
    auto block = [&](int64_t len) {
      Shape s = y.sizes();
      s[size_t(d)] = len;
      TensorOptions o(y.dtype());
      o.device = y.device();
      return full(s, value, o);
    };
    if (left > 0) parts.push_back(block(left));
    parts.push_back(y);
    if (right > 0) parts.push_back(block(right));
    if (parts.size() > 1) y = cat(parts, d);
  }
  return y;
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  EMBER_CHECK(indices.defined(), "one_hot: undefined tensor argument");
  EMBER_CHECK(indices.dtype() == DType::Int64 || indices.dtype() == DType::Int32,
              "one_hot: indices must be int64 or int32, got ", dtype_name(indices.dtype()));
  NoGradGuard no_grad;
  const bool empty = indices.numel() == 0;
  const int64_t lo = empty ? 0 : int64_t(indices.amin().item());
  const int64_t hi = empty ? -1 : int64_t(indices.amax().item());
  if (num_classes < 0) {
    EMBER_CHECK(!empty, "one_hot: num_classes cannot be inferred from empty indices; give it");
    num_classes = hi + 1;
  }
  EMBER_CHECK(lo >= 0 && hi < num_classes, "one_hot: index ", lo < 0 ? lo : hi,
              " is outside [0, ", num_classes, ")");
  TensorOptions o(indices.dtype());
  o.device = indices.device();
  const Tensor classes = arange(0, double(num_classes), 1, o);
  return indices.unsqueeze(-1).eq(classes).to(DType::Int64);
}

}  // namespace ember
