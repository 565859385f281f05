// CPU kernels of comparisons and logical ops (bool outputs) and of where / masked_fill.
// Inputs of a binary op share one dtype (the front ends promote), which selects the kernel.
#include "kernels/cpu/pointwise_compare.h"

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/loops.h"
#include "kernels/functors.h"

namespace ember::cpu {

namespace {
// Bool inputs are read as their bytes (0 or 1): compilers vectorize byte loads but not loops
// that load `bool`, and every functor here gives the same answer on 0/1 bytes.
template <class T>
using byte_if_bool = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

template <class F>
void to_bool(std::span<const Tensor> in, std::span<Tensor> out, const char* name) {
  visit_all(in[0].dtype(), name, [&]<class T>() {
    using S = byte_if_bool<T>;
    pointwise<bool, S, S>(out[0], in, F{});
  });
}
}  // namespace

void eq(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  to_bool<fn::Eq>(in, out, "eq");
}
void ne(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  to_bool<fn::Ne>(in, out, "ne");
}
void lt(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  to_bool<fn::Lt>(in, out, "lt");
}
void le(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  to_bool<fn::Le>(in, out, "le");
}
void gt(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  to_bool<fn::Gt>(in, out, "gt");
}
void ge(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  to_bool<fn::Ge>(in, out, "ge");
}
void logical_and(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  to_bool<fn::LogicalAnd>(in, out, "logical_and");
}
void logical_or(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  to_bool<fn::LogicalOr>(in, out, "logical_or");
}
void logical_xor(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  to_bool<fn::LogicalXor>(in, out, "logical_xor");
}
void logical_not(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  visit_all(in[0].dtype(), "logical_not",
            [&]<class T>() { pointwise<bool, byte_if_bool<T>>(out[0], in, fn::LogicalNot{}); });
}

void where(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  visit_all(out[0].dtype(), "where",
            [&]<class T>() {
              using S = byte_if_bool<T>;
              pointwise<S, uint8_t, S, S>(out[0], in, fn::Where{});
            });
}

void masked_fill(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  visit_all(out[0].dtype(), "masked_fill", [&]<class T>() {
    using S = byte_if_bool<T>;
    using C = compute_t<S>;
    // Round the value to the storage type first (the front end checked that it fits).
    C value = C(T(a.value));
    pointwise<S, S, uint8_t>(out[0], in, fn::MaskedFill<C>{value});
  });
}

}  // namespace ember::cpu
