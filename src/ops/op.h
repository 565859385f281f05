// The op table: every op is declared once in defs/*.def and everything else is derived from
// that entry: the OpId enum, names, kinds and traits here, and the OpImpl (shape rule, kernel,
// grad formula) that each family file must define. A declared op without an implementation
// fails the link (op_registry.cpp references op_impl_<name> for every entry).
#pragma once
#include <cstdint>
#include <string_view>

namespace ember {

enum class OpKind : uint8_t {
  Pointwise,  // out[i] = f(in0[i], in1[i], ...) with broadcasting
  Reduction,  // reduces dims of one input (incl. row-wise composites like softmax)
  View,       // output aliases the input's storage; no kernel
  Index,      // gathers/scatters by index tensors, concatenation, masks by position
  Extern,     // calls a library (BLAS)
  Factory,    // creates a tensor from attrs alone
  Random,     // draws from the counter-based generator
};

enum OpFlag : uint32_t {
  kFusable = 1u << 0,          // the compiler may fuse it into generated loops
  kDifferentiable = 1u << 1,   // has a grad formula
  kDataDependentShape = 1u << 2,  // output shape depends on input values
  kNeedsBreak = 1u << 3,       // capture cannot record it: graph break
  kInplaceable = 1u << 4,      // may write into its first input (add_, ...)
  kNoGrad = 1u << 5,           // float output that has no gradient: error if one is needed
  kCostly = 1u << 6,           // tens of flops per element (polynomials, divisions): on the CPU
                               // recomputing it costs more than reading it back from memory
};

enum class OpId : uint16_t {
#define EMBER_OP(name, kind, nin, nout, flags) name,
#include "ops/defs/all.def"
#undef EMBER_OP
  NumOps
};
inline constexpr int kNumOps = int(OpId::NumOps);

struct OpInfo {
  std::string_view name;
  OpKind kind;
  int8_t num_inputs;  // -1: variadic
  int8_t num_outputs;
  uint32_t flags;
  bool has(OpFlag f) const { return (flags & f) != 0; }
};

const OpInfo& op_info(OpId op);
inline std::string_view op_name(OpId op) { return op_info(op).name; }
std::string_view op_kind_name(OpKind k);

}  // namespace ember
