// C++/OpenMP code generation for fusion groups: one extern "C" kernel per group, all of a
// graph's kernels in one translation unit.
#pragma once
#include <string>

#include "compiler/pointwise_fusion.h"

namespace ember::compiler {

// The entry point of group k: void kernel_k(void* const* args), args = the group's inputs
// in FusionGroup::inputs order, then its output, then its extra_outputs.
std::string kernel_name(size_t k);

// The whole source for a graph's fusion plan. Strides and sizes are constants: the graph is
// specialized to its input metadata, and the runtime checks the buffers against it.
std::string generate_cpp(const FusionPlan& plan);

}  // namespace ember::compiler
