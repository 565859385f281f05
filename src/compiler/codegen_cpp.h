// C++/OpenMP code generation for fusion groups: one extern "C" kernel per group, all of a
// graph's kernels in one translation unit.
#pragma once
#include <string>
#include <vector>

#include "compiler/kernel_ir.h"
#include "compiler/pointwise_fusion.h"

namespace ember::compiler {

// The entry point of group k: void kernel_k(void* const* args), args = the group's inputs
// in FusionGroup::inputs order, (an attention group's q, k, v,) its output, then its
// extra_outputs.
std::string kernel_name(size_t k);
size_t kernel_arg_count(const FusionGroup& grp);

// Horizontal fusion: consecutive pointwise kernels run in one parallel region (one fork and
// join instead of one per kernel). A kernel that reads a result of an earlier kernel of the
// batch other than element for element at the same size waits at a barrier first.
// Kernels in a batch get no function of their own (generate_cpp), only their part of the batch.
struct KernelBatch {
  std::vector<int> kernels;         // group indices, in run order
  std::vector<bool> barrier_before;  // per kernel
  // False when the kernels together hold less work than one thread's share
  // (cpu::kParallelGrain elements): the batch then runs on the calling thread, without a
  // parallel region, whose fork and join would cost more than the kernels (microseconds, and
  // milliseconds when another process holds the core a worker thread waits for).
  bool parallel = true;
};
// A batch only skips barriers between kernels that loop alike (render_cpp.h, cpp_row_loop).

// void batch_b(void* const* args): the batch's kernels' arguments one after the other.
std::string batch_name(size_t b);

// The whole source for a graph's fusion plan and batches. Strides and sizes are constants
// unless the kernels given are over symbols: the graph is specialized to its input metadata,
// and the runtime checks the buffers against it.
// `lowered`, when given, holds the kernel IR to render for each group that has one (pointwise,
// gemm epilogue and row groups; kernels over symbolic sizes among them), by group index.
std::string generate_cpp(const FusionPlan& plan, const std::vector<KernelBatch>& batches = {},
                         const std::vector<kir::Kernel>* lowered = nullptr);

}  // namespace ember::compiler
