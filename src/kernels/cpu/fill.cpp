// Filling tensors with constants and ranges.
#include "kernels/cpu/fill.h"

#include "kernels/cpu/loops.h"

namespace ember::cpu {

void full(std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  visit_all(out[0].dtype(), "full", [&]<class T>() {
    T v = T(compute_t<T>(a.value));
    pointwise<T>(out[0], {}, [v]() { return v; });
  });
}

void arange(std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  visit_numeric(out[0].dtype(), "arange", [&]<class T>() {
    T* p = static_cast<T*>(out[0].impl()->data());
    int64_t n = out[0].numel();
    for (int64_t i = 0; i < n; ++i) p[i] = T(compute_t<T>(a.value + double(i) * a.value2));
  });
}

}  // namespace ember::cpu
