// CUDA kernels of the attention_backward op: D, then dK and dV, then dQ (attention_bwd.cuh),
// launched in that order on the device's stream.
#include "kernels/cuda/attention_bwd.cuh"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/kernel_table.h"
#include "kernels/attention_layout.h"

namespace ember::cuda {

namespace {
void attention_backward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (attention_layout::heads_inner(a)) {
    // cuDNN and ember's kernels both read and write the [B, H, L, F] views as they lie.
    auto ours = [](std::span<const Tensor> i, std::span<Tensor> o, const Attrs& b) {
      attn::backward(i, o, b, attn::cuda_runner(i[0], "attention_backward"));
    };
    auto either = [&](std::span<const Tensor> i, std::span<Tensor> o, const Attrs& b) {
      if (!cudnn_attention_backward(i, o, b)) ours(i, o, b);
      return true;
    };
    attention_layout::backward(in, out, a, either, ours);
    return;
  }
  if (cudnn_attention_backward(in, out, a)) return;  // cuDNN's where it takes it
  attn::backward(in, out, a, attn::cuda_runner(in[0], "attention_backward"));
}
}  // namespace

void register_attention_backward(KernelTable& t) {
  t[OpId::attention_backward] = attention_backward;
}

}  // namespace ember::cuda
