// Builds the op info and implementation tables from defs/all.def.
#include <array>
#include <sstream>
#include <utility>

#include "core/shape.h"
#include "ops/op_impl.h"

namespace ember {

namespace {
constexpr OpInfo kInfos[] = {
#define EMBER_OP(name, kind, nin, nout, flags) \
  OpInfo{#name, OpKind::kind, int8_t(nin), int8_t(nout), uint32_t(flags)},
#include "ops/defs/all.def"
#undef EMBER_OP
};
static_assert(sizeof(kInfos) / sizeof(kInfos[0]) == kNumOps, "op table out of sync");

const OpImpl* const kImpls[] = {
#define EMBER_OP(name, kind, nin, nout, flags) &op_impl_##name,
#include "ops/defs/all.def"
#undef EMBER_OP
};
static_assert(sizeof(kImpls) / sizeof(kImpls[0]) == kNumOps, "op impl table out of sync");

// Every shape rule runs through this check of the shapes it makes, so that no op hands the
// dispatcher, capture or a graph an output whose element or byte count does not fit in int64
// (core/shape.h), and the error names the op. Views allocate nothing: their element count
// must fit; other outputs are allocated: their bytes must.
template <size_t I>
MetaList checked_infer(std::span<const Tensor> in, const Attrs& a) {
  MetaList metas = kImpls[I]->infer(in, a);
  const OpInfo& info = kInfos[I];
  for (const TensorMeta& m : metas) {
    if (info.kind == OpKind::View)
      checked_numel(m.sizes, info.name.data());
    else
      checked_nbytes(m.sizes, m.dtype, info.name.data());
  }
  return metas;
}

template <size_t... I>
std::array<OpImpl, kNumOps> checked_impls(std::index_sequence<I...>) {
  return {OpImpl{&checked_infer<I>, kImpls[I]->cpu, kImpls[I]->grad, kImpls[I]->save_inputs,
                 kImpls[I]->save_outputs}...};
}
}  // namespace

const OpInfo& op_info(OpId op) { return kInfos[size_t(op)]; }
const OpImpl& op_impl(OpId op) {
  // Built on first use: the entries live in other translation units.
  static const std::array<OpImpl, kNumOps> impls =
      checked_impls(std::make_index_sequence<kNumOps>());
  return impls[size_t(op)];
}

std::string_view op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::Pointwise: return "pointwise";
    case OpKind::Reduction: return "reduction";
    case OpKind::View: return "view";
    case OpKind::Index: return "index";
    case OpKind::Extern: return "extern";
    case OpKind::Factory: return "factory";
    case OpKind::Random: return "random";
  }
  return "?";
}

std::vector<std::string> validate_op_table() {
  std::vector<std::string> problems;
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = kInfos[i];
    const OpImpl& impl = *kImpls[i];
    std::string n(info.name);
    if (!impl.infer) problems.push_back(n + ": no shape rule");
    if (info.kind != OpKind::View && !impl.cpu) problems.push_back(n + ": no CPU kernel");
    if (info.has(kDifferentiable) && !impl.grad)
      problems.push_back(n + ": declared differentiable but has no grad formula");
    if (!info.has(kDifferentiable) && impl.grad)
      problems.push_back(n + ": has a grad formula but is not declared differentiable");
  }
  return problems;
}

}  // namespace ember
