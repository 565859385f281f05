// cached_attention with the decode step's cache write joined to it, for the compiler's fold
// (compiler/cuda_folds.h, AppendFold): one launch where the graph has the two writes
// (where(put, new, cache) into each cache) and the attention. src/kernels/cuda/cached_attention.cu
// implements it; in a build without CUDA it takes nothing.
#pragma once
#include "ember/tensor.h"

namespace ember::cached_attention_append {

// Writes k_new's and v_new's rows into k_cache and v_cache at the slots where `put` is true,
// then gives cached_attention(q, k_cache, v_cache, pos) with scale `scale` into `out` (made by
// the caller, of the op's shape and q's dtype). The caches are contiguous [B, S, E] and
// [B, S, F] (any leading dims), q is as the op takes it, k_new and v_new are [B, 1, E] and
// [B, 1, F] by strides over the caches' leading dims (broadcast over slots), put is S bools. False
// where the operands are not laid out so (the caller then runs the writes and the op apart).
bool run(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
         const Tensor& pos, const Tensor& put, const Tensor& k_new, const Tensor& v_new,
         double scale, Tensor& out);

}  // namespace ember::cached_attention_append
