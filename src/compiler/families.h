// Compiled code shared between graphs of one program at different sizes. Capture specializes
// every graph to its sizes (C++ around the ops may branch on them unseen), so a program called
// at a new size is a new graph; when its kernels have the form of an earlier graph's, the
// kernels of the two (and of later ones) are fitted over symbolic sizes (generalize.h) and one
// library built from them serves each graph whose kernels they reproduce exactly, bound to
// that graph's sizes. The size symbols are the graph inputs' dims, numbered in order
// (input 0's dims first): s<i> is the i-th.
#pragma once
#include <optional>
#include <vector>

#include "compiler/kernel_ir.h"
#include "graph/graph.h"

namespace ember::compiler {

// The inputs' dims of g, in order: the values of its size symbols.
std::vector<int64_t> input_dims(const graph::Graph& g);

// The kernels over symbolic sizes of the family of `lowered` (a graph's kernels, by group),
// or nothing when there are none yet or they do not give `lowered` exactly at `dims`. Records
// `lowered` as a sample of its family (also when `use` is false: the graph is specialized, but
// a later graph of a program called at varying sizes may fit with it). `first`: the family
// had no sample at other sizes.
struct FamilyLookup {
  std::optional<std::vector<kir::Kernel>> kernels;
  bool first = false;
};
// `fixed`: positions in `dims` that must not become symbols (Graph::static_dims).
FamilyLookup family_kernels(const std::vector<kir::Kernel>& lowered,
                            const std::vector<int64_t>& dims, bool use,
                            const std::vector<int>& fixed = {});

// Forgets every family (tests).
void clear_families();

}  // namespace ember::compiler
