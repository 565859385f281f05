// CPU kernels of comparisons and logical ops (bool outputs) and of where / masked_fill.
// Inputs of a binary op share one dtype (the front ends promote), which selects the kernel.
#include "kernels/cpu/pointwise_compare.h"

#include "kernels/cpu/loops.h"
#include "kernels/functors.h"

namespace ember::cpu {

namespace {
template <class F>
void to_bool(std::span<const Tensor> in, std::span<Tensor> out, const char* name) {
  visit_all(in[0].dtype(), name, [&]<class T>() { pointwise<bool, T, T>(out[0], in, F{}); });
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
            [&]<class T>() { pointwise<bool, T>(out[0], in, fn::LogicalNot{}); });
}

void where(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  visit_all(out[0].dtype(), "where",
            [&]<class T>() { pointwise<T, bool, T, T>(out[0], in, fn::Where{}); });
}

void masked_fill(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  visit_all(out[0].dtype(), "masked_fill", [&]<class T>() {
    using C = compute_t<T>;
    // Round the value to the storage type first (the front end checked that it fits).
    C value = C(T(a.value));
    pointwise<T, T, bool>(out[0], in, fn::MaskedFill<C>{value});
  });
}

}  // namespace ember::cpu
