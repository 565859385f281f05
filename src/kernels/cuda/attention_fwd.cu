// CUDA kernels of the attention op: the forward of attention_fwd.cuh, launched on the device's
// stream. Instantiated for float32, float64, float16 and bfloat16, head tiles of 64 and 128, with
// and without 16-byte loads. Also the attention_keep op's: the tensor-core kernels' keep flags
// drawn ahead (attention_mma_keep.cuh).
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

// in: the rng_state; attrs.shape = {batch, L, S}.
void attention_keep(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const char* op = "attention_keep";
  const Tensor rng = in[0].contiguous();
  EMBER_CHECK(rng.device() == out[0].device(), op, ": the rng_state is on ", rng.device().str(),
              ", the flags on ", out[0].device().str());
  attn::Problem<float> p;
  p.batch = a.shape[0];
  p.L = a.shape[1];
  p.S = a.shape[2];
  p.causal = a.flag;
  attn::set_dropout(p, a, &rng, op);
  attn::mma::draw_keep(p, static_cast<uint32_t*>(out[0].impl()->data()),
                       attn::cuda_runner(out[0], op), op);
}
}  // namespace

void register_attention_forward(KernelTable& t) {
  t[OpId::attention] = attention;
  t[OpId::attention_keep] = attention_keep;
}

}  // namespace ember::cuda
