// CUDA kernel of the attention op: the forward of attention_fwd.cuh, launched on the device's
// stream. Instantiated for float32, float64, float16 and bfloat16, head tiles of 64 and 128, with
// and without 16-byte loads.
#include "kernels/cuda/attention_fwd.cuh"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/kernel_table.h"
#include "kernels/attention_layout.h"

namespace ember::cuda {

namespace {
void attention(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  auto ours = [](std::span<const Tensor> i, std::span<Tensor> o, const Attrs& b) {
    attn::forward(i, o, b, attn::cuda_runner(i[0], "attention"));
  };
  if (attention_layout::heads_inner(a)) {
    // cuDNN and ember's kernels both write the [B, H, L, F] view as it lies.
    auto either = [&](std::span<const Tensor> i, std::span<Tensor> o, const Attrs& b) {
      if (!cudnn_attention(i, o, b)) ours(i, o, b);
      return true;
    };
    attention_layout::forward(in, out, a, either, ours);
    return;
  }
  if (cudnn_attention(in, out, a)) return;  // cuDNN's fused kernels where they take it
  ours(in, out, a);
}
}  // namespace

void register_attention_forward(KernelTable& t) {
  t[OpId::attention] = attention;
}

}  // namespace ember::cuda
