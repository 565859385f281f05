// Factory ops (full, arange) and the factory front ends.
#include <cmath>

#include "core/make_tensor.h"
#include "kernels/cpu/fill.h"
#include "ops/frontend.h"

namespace ember {

namespace {
MetaList infer_factory(std::span<const Tensor>, const Attrs& a) {
  return {TensorMeta{a.shape, {}, 0, a.dtype}};
}
// Factories run on the device asked for (Attrs::device).
Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}

// full under the name the caller used (zeros, ones ...), for its errors.
Tensor full_named(const Shape& shape, double value, TensorOptions opts, const char* op) {
  check_sizes(shape, opts.dtype, op);
  Attrs a;
  a.shape = shape;
  a.value = value;
  a.dtype = opts.dtype;
  a.device = opts.device;
  return finish(dispatch1(OpId::full, {}, a), opts);
}
}  // namespace

const OpImpl op_impl_full{infer_factory, cpu::full, nullptr};
const OpImpl op_impl_arange{infer_factory, cpu::arange, nullptr};

Tensor empty(const Shape& shape, TensorOptions opts) {
  check_sizes(shape, opts.dtype, "empty");
  return finish(make_tensor(shape, opts.dtype, opts.device), opts);
}

Tensor full(const Shape& shape, double value, TensorOptions opts) {
  return full_named(shape, value, opts, "full");
}
Tensor zeros(const Shape& shape, TensorOptions opts) {
  return full_named(shape, 0, opts, "zeros");
}
Tensor ones(const Shape& shape, TensorOptions opts) {
  return full_named(shape, 1, opts, "ones");
}
// On t's device, as t.
Tensor full_like(const Tensor& t, double value) {
  TensorOptions o(t.dtype());
  o.device = t.device();
  return full(t.sizes(), value, o);
}
Tensor zeros_like(const Tensor& t) { return full_like(t, 0); }
Tensor ones_like(const Tensor& t) { return full_like(t, 1); }
Tensor scalar_tensor(double value, DType dtype) { return full({}, value, dtype); }

Tensor arange(double start, double end, double step, TensorOptions opts) {
  EMBER_CHECK(step != 0 && !std::isnan(step), "arange: step must be a nonzero number, got ", step);
  EMBER_CHECK(std::isfinite(start) && std::isfinite(end), "arange: bounds must be finite");
  double n = std::ceil((end - start) / step);
  // A count past int64 would not convert (and could not be a size anyway).
  EMBER_CHECK(n < 0x1p63, "arange: [", start, ", ", end, ") with step ", step, " has ", n,
              " values, too many elements for a tensor (at most ", kMaxSize,
              "); use a larger step or a shorter range");
  Attrs a;
  a.shape = {n > 0 ? int64_t(n) : 0};
  a.value = start;
  a.value2 = step;
  a.dtype = opts.dtype;
  a.device = opts.device;
  return finish(dispatch1(OpId::arange, {}, a), opts);
}
Tensor arange(int64_t end, TensorOptions opts) { return arange(0, double(end), 1, opts); }

Tensor& Tensor::fill_(double v) {
  Attrs a;
  a.shape = sizes();
  a.value = v;
  a.dtype = dtype();
  EMBER_CHECK(!(requires_grad() && is_leaf() && is_grad_enabled()),
              "fill_: a leaf tensor that requires grad cannot be filled in place while grad "
              "mode is on; use NoGradGuard");
  // The base of a view would keep its old history (as for other in-place ops on views).
  EMBER_CHECK(!(requires_grad() && impl()->is_view && is_grad_enabled()),
              "fill_: in-place update of a view while recording gradients is not supported "
              "(shape ", shape_str(), "); build a new tensor instead");
  if (capture_hook()) {
    capture_hook()->on_inplace(OpId::full, {}, *this, a);
  } else {
    run_backend_into(OpId::full, {}, *this, a);
  }
  if (impl()->storage) impl()->storage->version++;
  if (impl()->autograd) {  // constant now: no history (and not a leaf that wants a grad)
    bool leaf = is_leaf();
    impl()->autograd->grad_fn = nullptr;
    if (!leaf) impl()->autograd->requires_grad = false;
  }
  return *this;
}
Tensor& Tensor::zero_() { return fill_(0); }

template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape, TensorOptions opts) {
  check_sizes(shape, dtype_of<T>::value, "from_vector");
  EMBER_CHECK(int64_t(data.size()) == shape_numel(shape), "from_vector: ", data.size(),
              " values do not fill shape ", shape_str(shape), " (", shape_numel(shape),
              " elements)");
  Tensor t = make_tensor(shape, dtype_of<T>::value, opts.device);
  if (!data.empty()) std::memcpy(t.data_ptr(), data.data(), data.size() * sizeof(T));
  if (opts.dtype != t.dtype()) {
    NoGradGuard g;
    t = t.to(opts.dtype);
  }
  return finish(t, opts);
}
template Tensor from_vector(const std::vector<float>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<double>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<int32_t>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<int64_t>&, const Shape&, TensorOptions);

Tensor tensor(std::initializer_list<double> values, TensorOptions opts) {
  return from_vector(std::vector<double>(values), {int64_t(values.size())}, opts);
}

}  // namespace ember
