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
  // cuDNN and ember's kernels both write the heads-inner layout's [B, H, L, F] view as it lies.
  if (attention_layout::heads_inner(a))
    return attention_layout::forward(in, out, a, attention, /*writes_strided=*/true);
  if (cudnn_attention(in, out, a)) return;  // cuDNN's fused kernels where they take it
  attn::forward(in, out, a, attn::cuda_runner(in[0], "attention"));
}
}  // namespace

void register_attention_forward(KernelTable& t) {
  t[OpId::attention] = attention;
}

}  // namespace ember::cuda
