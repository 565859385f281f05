// Building loop plans: broadcast strides, dropping size-1 dims, coalescing.
#include "kernels/cpu/loops.h"

#include "core/shape.h"

namespace ember::cpu {

LoopPlan make_loop_plan(const Tensor& out, std::span<const Tensor> ins) {
  LoopPlan p;
  p.nops = int(ins.size()) + 1;
  EMBER_CHECK(p.nops <= kMaxOperands, "internal: too many operands for a pointwise loop");
  const int64_t nd = out.dim();
  EMBER_CHECK(nd <= kMaxLoopDims, "tensors of more than ", kMaxLoopDims, " dims are not supported");
  p.numel = out.numel();
  const Tensor* ops[kMaxOperands];
  ops[0] = &out;
  for (size_t i = 0; i < ins.size(); ++i) ops[i + 1] = &ins[i];
  for (int k = 0; k < p.nops; ++k) p.data[k] = static_cast<char*>(ops[k]->impl()->data());

  // Innermost first; broadcast dims get stride 0.
  int n = 0;
  for (int64_t d = nd - 1; d >= 0; --d) {
    int64_t size = out.sizes()[d];
    if (size == 1) continue;
    p.size[n] = size;
    for (int k = 0; k < p.nops; ++k) {
      const Tensor& t = *ops[k];
      int64_t td = d - (nd - t.dim());
      int64_t st = 0;
      if (td >= 0 && t.sizes()[td] != 1) st = t.strides()[td] * int64_t(dtype_size(t.dtype()));
      p.stride[n][k] = st;
    }
    ++n;
  }
  if (n == 0) {
    p.size[0] = 1;
    for (int k = 0; k < p.nops; ++k) p.stride[0][k] = 0;
    n = 1;
  }
  // Coalesce dim d+1 into d when every operand steps through them as one.
  int m = 0;
  for (int d = 1; d < n; ++d) {
    bool can = true;
    for (int k = 0; k < p.nops && can; ++k)
      can = p.stride[d][k] == p.stride[m][k] * p.size[m];
    if (can) {
      p.size[m] *= p.size[d];
    } else {
      ++m;
      p.size[m] = p.size[d];
      for (int k = 0; k < p.nops; ++k) p.stride[m][k] = p.stride[d][k];
    }
  }
  p.ndim = m + 1;
  return p;
}

}  // namespace ember::cpu
