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

// A row group (FusionGroup::row): the buffers are the group's inputs, its output, then its
// extra outputs (the row op's statistics).
kir::Kernel lower_rows(const FusionGroup& grp, const std::string& name);
// The row's offset in a tensor of one value per row of k's domain (all dims but the last).
kir::Index with_columns_dropped(const kir::Kernel& k);

// Whether a group's kernel is a pattern's (attention forward or backward, layer_norm backward,
// column sums): C++ written by its emitter, kept as kir::Pattern.
bool is_pattern(const FusionGroup& grp);
// A pattern group's kernel: the emitter's text with its size integers lifted out.
kir::Kernel lower_pattern(const FusionGroup& grp, const std::string& name);

// A kernel over `domain` with the group's buffers: its inputs, its output, its extra outputs;
// the graph nodes as its comment.
kir::Kernel kernel_of_group(const FusionGroup& grp, const Shape& domain, const std::string& name);

// The element offset of `v` read by the output element at the kernel's coordinates, `v`
// broadcast to `out` (size-1 and stride-0 dims read at 0).
kir::Index broadcast_index(const graph::Value& v, const Shape& out);

// The statement that computes a fused pointwise node's output: a conversion for a cast, else
// a call of its functor on its inputs.
kir::Stmt node_stmt(const graph::Node& node);

}  // namespace ember::compiler
