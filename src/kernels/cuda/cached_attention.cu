// CUDA launch of cached_attention (the kernels: cached_attention.cuh), on the device's stream:
// a block for each query row and split of the cache, the last of a row's blocks joining its
// splits. One kernel for what the ops take five (the scores' gemm, scale, mask, softmax, the
// values' gemm): a decode step's attention over a cache written in place.
#include "core/make_tensor.h"
#include "kernels/cuda/cached_attention.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/kernel_table.h"

namespace ember::cuda {

namespace {

void cached_attention(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const char* op = "cached_attention";
  Tensor q = in[0];
  const Tensor k = in[1].is_contiguous() ? in[1] : in[1].contiguous(),
               v = in[2].is_contiguous() ? in[2] : in[2].contiguous();
  attn::CachedArgs a;
  a.L = q.size(-2);
  a.E = q.size(-1);
  a.S = k.size(-2);
  a.F = v.size(-1);
  a.scale = attrs.value2;
  if (out[0].numel() == 0) return;
  const int64_t rows = out[0].numel() / a.F, batch = rows / a.L;
  if (q.dim() > 4) q = q.contiguous().view({1, batch, a.L, a.E});
  attn::cached_q_layout(a, q);
  a.k = k.impl()->data();
  a.v = v.impl()->data();
  a.pos = static_cast<const int64_t*>(in[3].impl()->data());
  a.out = out[0].impl()->data();
  const int device = q.device().index;
  detail::use_device(device);
  const int64_t splits = a.splits = attn::cached_splits(a.S);
  EMBER_CHECK(rows * splits < (int64_t(1) << 31), op, ": ", rows, " query rows over ", a.S,
              " cache slots are more blocks than one launch takes");
  const bool wide = q.dtype() == DType::Float64;
  const Tensor ws = make_tensor({attn::cached_workspace(rows, a.S, a.F)},
                                wide ? DType::Float64 : DType::Float32, q.device());
  visit<Kinds::Float>(q.dtype(), op, [&]<class T>() {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const size_t smem = attn::cached_attention_smem<C>();  // under 3 KB, whatever the head
    auto split = attn::cached_attention_split_kernel<T, C>;
    C* w = static_cast<C*>(ws.impl()->data());
    // A row's last block joins it, counted in the device's counters (one launch), where there
    // are enough of them; else a second kernel joins the rows.
    a.counters = rows <= detail::kCounters ? detail::counters(device) : nullptr;
    split<<<unsigned(rows * splits), attn::kThreads, smem, detail::stream(device)>>>(a, w);
    detail::check(cudaGetLastError(), op);
    if (!a.counters) {
      attn::cached_attention_join_kernel<T, C>
          <<<unsigned(rows), attn::kThreads, attn::cached_join_smem<C>(),
             detail::stream(device)>>>(a, w);
      detail::check(cudaGetLastError(), op);
    }
  });
}

}  // namespace

void register_cached_attention(KernelTable& t) {
  t[OpId::cached_attention] = cached_attention;
}

}  // namespace ember::cuda
