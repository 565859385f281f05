// Mixed precision, as PyTorch's autocast: inside an `autocast` scope each op runs in the dtype
// that suits it, while parameters stay float32 (the master weights) and their grads come back
// in float32 through the casts, which are ordinary differentiable ops.
//   Lower precision (the scope's dtype, bfloat16 or float16): matmul, bmm, linear, and so the
//     products inside scaled_dot_product_attention; their float32 inputs are cast (a transposed
//     matrix, such as a linear layer's weight.t(), is cast as it lies and stays transposed).
//   Float32: softmax, log_softmax, layer_norm, cross_entropy; their half-precision inputs are
//     cast up, so reductions, normalizations and losses accumulate in float32. cross_entropy
//     reads half logits without the copy (its kernels accumulate in float32; the loss is
//     float32 and equals the one through a float32 copy), so the grad saves no float32 logits.
//   Everything else: as outside the scope (the widest input dtype wins).
// Scopes nest; the innermost decides. The state is per thread, and compiled functions guard on
// it (a function traced outside a scope is traced again inside one).
//
//   { ember::autocast scope(DType::BFloat16); Tensor loss = model.loss(x, y); }
//   loss.backward();
#pragma once
#include <optional>

#include "ember/dtype.h"

namespace ember {

class autocast {
 public:
  // dtype: BFloat16 or Float16. enabled = false makes a scope with autocast off (to run a
  // region in full precision inside an outer scope).
  explicit autocast(DType dtype = DType::BFloat16, bool enabled = true);
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  std::optional<DType> prev_;
};

// The dtype of the innermost enabled autocast scope on this thread, if any.
std::optional<DType> autocast_dtype();

}  // namespace ember
