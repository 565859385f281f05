// CUDA kernels of the attention_backward op: D, then dK and dV, then dQ (attention_bwd.cuh),
// launched in that order on the device's stream.
#include "kernels/cuda/attention_bwd.cuh"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/kernel_table.h"
#include "kernels/attention_layout.h"

namespace ember::cuda {

namespace {
void attention_backward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  // cuDNN and ember's kernels both read and write the heads-inner layout's views as they lie.
  if (attention_layout::heads_inner(a))
    return attention_layout::backward(in, out, a, attention_backward, /*writes_strided=*/true);
  if (cudnn_attention_backward(in, out, a)) return;  // cuDNN's where it takes it
  attn::backward(in, out, a, attn::cuda_runner(in[0], "attention_backward"));
}
}  // namespace

void register_attention_backward(KernelTable& t) {
  t[OpId::attention_backward] = attention_backward;
}

}  // namespace ember::cuda
