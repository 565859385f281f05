// The CUDA backend's kernels by op, filled once by each family's register_* function.
#pragma once
#include <array>

#include "ops/op_impl.h"

namespace ember::cuda {

struct KernelTable {
  std::array<KernelFn, kNumOps> fns{};
  KernelFn& operator[](OpId op) { return fns[size_t(op)]; }
};

void register_pointwise(KernelTable& t);          // pointwise.cu: arithmetic
void register_pointwise_math(KernelTable& t);     // pointwise_math.cu: float math, activations
void register_pointwise_compare(KernelTable& t);  // pointwise_compare.cu: comparisons, where
void register_pointwise_cast(KernelTable& t);     // pointwise_cast.cu: cast, clone
void register_pointwise_attrs(KernelTable& t);
void register_reductions(KernelTable& t);
void register_softmax(KernelTable& t);  // softmax.cu
void register_matmul(KernelTable& t);
void register_layer_norm(KernelTable& t);
void register_layer_norm_backward(KernelTable& t);  // layer_norm_backward.cu
void register_index(KernelTable& t);         // index.cu
void register_losses(KernelTable& t);        // cross_entropy.cu
void register_random(KernelTable& t);        // random.cu
void register_shape_ops(KernelTable& t);     // shape_ops.cu: cat, tril/triu, topk
void register_factories(KernelTable& t);     // factory.cu: full, arange
void register_nonzero(KernelTable& t);       // nonzero.cu
void register_attention_forward(KernelTable& t);   // attention_fwd.cu (and attention_keep)
void register_attention_backward(KernelTable& t);  // attention_bwd.cu
void register_cached_attention(KernelTable& t);    // cached_attention.cu

}  // namespace ember::cuda
