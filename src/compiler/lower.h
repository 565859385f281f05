// Lowering: a fusion group to the kernel IR (kernel_ir.h). Index math, broadcasting, the
// functor of each node and the loads a group needs are decided here, once for every renderer.
#pragma once
#include <string>

#include "compiler/kernel_ir.h"
#include "compiler/pointwise_fusion.h"

namespace ember::compiler {

// An elementwise group (FusionGroup::elementwise(): a pointwise group or a gemm's epilogue):
// the buffers are the group's inputs in order, then its output.
kir::Kernel lower_elementwise(const FusionGroup& grp, const std::string& name);

// The element offset of `v` read by the output element at the kernel's coordinates, `v`
// broadcast to `out` (size-1 and stride-0 dims read at 0).
kir::Index broadcast_index(const graph::Value& v, const Shape& out);

}  // namespace ember::compiler
