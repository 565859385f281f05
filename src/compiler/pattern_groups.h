// Kernels for whole subgraphs of a known form, found before the greedy grouping of
// pointwise_fusion.cpp takes their nodes: the backward of attention (FusionGroup::attn_bwd) and
// of layer_norm (FusionGroup::ln_bwd), as the grad formulas trace them.
#pragma once
#include <vector>

#include "compiler/pointwise_fusion.h"

namespace ember::compiler {

// Appends a group for each match to `groups` and marks its nodes in `taken` (by position in
// g.nodes()). `uses` counts each value's readers (graph outputs count 2), `readers` lists them.
void plan_pattern_groups(const graph::Graph& g, const std::vector<int>& uses,
                         const std::vector<std::vector<const graph::Node*>>& readers,
                         std::vector<char>& taken, std::vector<FusionGroup>& groups);

// For a pattern group whose nodes are in graph order: its fixed kernel arguments and its
// results, the last one in graph order as `output` (the kernel runs there) and the others as
// extra outputs. `index_of` gives a node's position by its first output's value id. Other
// groups are left as they are.
void finish_pattern_group(FusionGroup& grp, const std::vector<int>& index_of);

}  // namespace ember::compiler
