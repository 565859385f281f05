// Buffers of the row-wise kernels: widening, packing and storing back. Contiguous 16-bit data
// converts in plain loops (hardware conversions where the compiler offers _Float16); other
// layouts go through the cast kernel.
#include "kernels/cpu/rowwise_buffers.h"

#include "core/make_tensor.h"
#include "kernels/cpu/pointwise.h"
#include "kernels/cpu/reduce_loops.h"

namespace ember::cpu {

namespace {
void copy_into(const Tensor& src, const Tensor& dst) {
  Tensor s[1] = {src};
  Tensor d[1] = {dst};
  if (src.dtype() == dst.dtype())
    clone(s, d, Attrs{});
  else
    cast(s, d, Attrs{});
}

template <class T>
T narrow(float x) {
#ifdef __FLT16_MAX__
  if constexpr (std::is_same_v<T, Half>) {
    Half h;
    h.bits = std::bit_cast<uint16_t>(_Float16(x));
    return h;
  }
#endif
  return T(x);
}

// Contiguous 16-bit <-> float32 conversion; false when the pair or layout is not handled here.
bool convert_16bit(const Tensor& src, const Tensor& dst) {
  if (!src.is_contiguous() || !dst.is_contiguous()) return false;
  const int64_t n = src.numel();
  auto run = [&]<class From, class To>(auto&& f) {
    const From* s = static_cast<const From*>(src.impl()->data());
    To* d = static_cast<To*>(dst.impl()->data());
#pragma omp parallel for simd schedule(static) if (use_threads(n))
    for (int64_t i = 0; i < n; ++i) d[i] = f(s[i]);
  };
  const DType a = src.dtype(), b = dst.dtype();
  if (a == DType::Float16 && b == DType::Float32)
    run.template operator()<Half, float>([](Half h) { return load_compute(h); });
  else if (a == DType::BFloat16 && b == DType::Float32)
    run.template operator()<BFloat16, float>([](BFloat16 h) { return load_compute(h); });
  else if (a == DType::Float32 && b == DType::Float16)
    run.template operator()<float, Half>([](float x) { return narrow<Half>(x); });
  else if (a == DType::Float32 && b == DType::BFloat16)
    run.template operator()<float, BFloat16>([](float x) { return narrow<BFloat16>(x); });
  else
    return false;
  return true;
}
}  // namespace

Tensor compute_contiguous(const Tensor& t) {
  DType c = compute_dtype(t.dtype());
  if (t.dtype() == c && t.is_contiguous()) return t;
  Tensor out = make_tensor(t.sizes(), c, t.device());
  if (t.numel() > 0 && !convert_16bit(t, out)) copy_into(t, out);
  return out;
}

Tensor packed(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = make_tensor(t.sizes(), t.dtype(), t.device());
  if (t.numel() > 0) copy_into(t, out);
  return out;
}

Tensor compute_buffer(const Tensor& out) {
  DType c = compute_dtype(out.dtype());
  return out.dtype() == c ? out : make_tensor(out.sizes(), c, out.device());
}

void store_buffer(const Tensor& buf, const Tensor& out) {
  if (buf.impl() == out.impl() || out.numel() == 0) return;
  if (!convert_16bit(buf, out)) copy_into(buf, out);
}

}  // namespace ember::cpu
