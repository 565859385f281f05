// The CUDA backend's kernels by op, filled once by each family's register_* function.
#pragma once
#include <array>

#include "ops/op_impl.h"

namespace ember::cuda {

struct KernelTable {
  std::array<KernelFn, kNumOps> fns{};
  KernelFn& operator[](OpId op) { return fns[size_t(op)]; }
};

void register_pointwise(KernelTable& t);
void register_pointwise_attrs(KernelTable& t);
void register_reductions(KernelTable& t);
void register_matmul(KernelTable& t);
void register_layer_norm(KernelTable& t);

}  // namespace ember::cuda
