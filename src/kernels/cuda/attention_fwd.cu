// CUDA kernel of the attention op: the forward of attention_fwd.cuh, launched on the device's
// stream. Instantiated for float32, float64, float16 and bfloat16, head tiles of 64 and 128, with
// and without 16-byte loads.
#include "kernels/cuda/attention_fwd.cuh"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/kernel_table.h"

namespace ember::cuda {

namespace {
void attention(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (cudnn_attention(in, out, a)) return;  // cuDNN's fused kernels where they take it
  attn::forward(in, out, a, attn::cuda_runner(in[0], "attention"));
}
}  // namespace

void register_attention_forward(KernelTable& t) {
  t[OpId::attention] = attention;
}

}  // namespace ember::cuda
