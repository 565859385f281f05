// Builds the op info and implementation tables from defs/all.def.
#include <sstream>

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
}  // namespace

const OpInfo& op_info(OpId op) { return kInfos[size_t(op)]; }
const OpImpl& op_impl(OpId op) { return *kImpls[size_t(op)]; }

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
