// Inter-op parallelism for the matmuls a compiled graph leaves to BLAS: two independent
// matmuls close to each other in the step order (a backward's grad of a layer's input and grad
// of its weight, say) run side by side, one per thread, each single-threaded BLAS call
// working without the other's synchronization.
#pragma once
#include <vector>

#include "graph/graph.h"

namespace ember::compiler {

// steps[s] is the node of an eager step, or null for a generated kernel. Returns, per step,
// the step it is paired with (each pair listed at both ends), or -1. The second of a pair comes
// after the first with only views in between that do not read the first's result (they run
// before the pair); the second does not read the first's result.
std::vector<int> plan_gemm_pairs(const std::vector<const graph::Node*>& steps);

// Whether a node is a matmul this pairing handles (float32 or float64, on the CPU).
bool pairable_matmul(const graph::Node& n);

}  // namespace ember::compiler
