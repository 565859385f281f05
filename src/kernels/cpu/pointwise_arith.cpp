// CPU kernels: arithmetic, negation, casts and copies.
#include "kernels/cpu/loops.h"
#include "kernels/cpu/pointwise.h"
#include "kernels/functors.h"

namespace ember::cpu {

namespace {
template <class F>
void binary_same_type(std::span<const Tensor> in, std::span<Tensor> out, const char* name) {
  visit_numeric(out[0].dtype(), name, [&]<class T>() { pointwise<T, T, T>(out[0], in, F{}); });
}
}  // namespace

void add(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  binary_same_type<fn::Add>(in, out, "add");
}
void sub(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  binary_same_type<fn::Sub>(in, out, "sub");
}
void mul(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  binary_same_type<fn::Mul>(in, out, "mul");
}
void div(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  binary_same_type<fn::Div>(in, out, "div");
}
void neg(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  visit_numeric(out[0].dtype(), "neg",
                [&]<class T>() { pointwise<T, T>(out[0], in, fn::Neg{}); });
}

void cast(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  visit_all(in[0].dtype(), "cast", [&]<class S>() {
    visit_all(out[0].dtype(), "cast", [&]<class D>() {
      if constexpr (std::is_same_v<D, bool>) {
        pointwise<D, S>(out[0], in, [](auto v) { return v != decltype(v)(0); });
      } else {
        pointwise<D, S>(out[0], in, [](auto v) { return compute_t<D>(v); });
      }
    });
  });
}

void clone(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  // Copies by element size: the bits are moved as they are.
  switch (dtype_size(in[0].dtype())) {
    case 1: pointwise<uint8_t, uint8_t>(out[0], in, fn::Identity{}); break;
    case 2: pointwise<uint16_t, uint16_t>(out[0], in, fn::Identity{}); break;
    case 4: pointwise<uint32_t, uint32_t>(out[0], in, fn::Identity{}); break;
    case 8: pointwise<uint64_t, uint64_t>(out[0], in, fn::Identity{}); break;
  }
}

}  // namespace ember::cpu
