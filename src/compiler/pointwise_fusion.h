// Pointwise fusion: which graph nodes the compiler runs as one generated loop. A group is a
// tree of fusable pointwise nodes of one output shape and dtype whose intermediates are read
// only inside the tree; its root's value is the one result that leaves the group.
#pragma once
#include <string>
#include <vector>

#include "graph/graph.h"

namespace ember::compiler {

// How generated code computes one op: a functor of kernels/functors.h and its arity.
struct FusedOpInfo {
  const char* functor;  // "Relu": called as ember::fn::Relu{}(...)
  int arity;
};
// The one table of ops the compiler can fuse; null for ops it leaves to the eager kernels.
// Some ops pick their functor from attrs (gelu's tanh flag).
const FusedOpInfo* fused_op_info(const graph::Node& n);

struct FusionGroup {
  std::vector<const graph::Node*> nodes;     // in graph order; the last is the root
  std::vector<const graph::Value*> inputs;   // values read from outside, first-use order
  const graph::Value* output = nullptr;      // the root's value
};

struct FusionPlan {
  std::vector<FusionGroup> groups;
  // Per node (by position in g.nodes()): its group, or -1 when it runs eagerly.
  std::vector<int> group_of_node;
};

FusionPlan plan_fusion(const graph::Graph& g);

}  // namespace ember::compiler
