// Two embedding lookups summed, for the compiler's fold (compiler/cuda_folds.h, EmbeddingFold):
// one launch where the graph has two index_selects and the add (a GPT's token and position
// embeddings). src/kernels/cuda/index.cu implements it; in a build without CUDA it takes
// nothing.
#pragma once
#include "ember/tensor.h"

namespace ember::embedding_add {

// out[r, :] = a_weight[a_index[r], :] + b_weight[b_index[b_index has one entry ? 0 : r], :],
// each sum in the dtype's compute type (float for the 16-bit floats) rounded once, as
// index_select then add give it. out is contiguous with rows * C elements (C the weights'
// second dim); the weights are contiguous [*, C] of out's floating dtype; the indices 1-D
// contiguous int64 or int32, a_index with `rows` entries. An index outside its weight's rows is
// a fault, as index_select's (kernels/cuda/fault.cuh). False where the operands are not laid
// out so (the caller then runs the lookups and the add apart).
bool run(const Tensor& a_weight, const Tensor& a_index, const Tensor& b_weight,
         const Tensor& b_index, Tensor& out);

}  // namespace ember::embedding_add
