// CUDA launch of cached_attention (the kernels: cached_attention.cuh), on the device's stream:
// a block for each query row and split of the cache, the last of a row's blocks joining its
// splits. One kernel for what the ops take five (the scores' gemm, scale, mask, softmax, the
// values' gemm): a decode step's attention over a cache written in place.
#include <cstdint>

#include "core/env.h"
#include "core/make_tensor.h"
#include "kernels/cached_attention_append.h"
#include "kernels/cuda/cached_attention.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/kernel_table.h"
#include "kernels/cuda/launch.cuh"

namespace ember::cuda {

namespace {

// Whether cached_attention stages its value rows in shared memory where they fit
// (CachedArgs::v_staged): unless EMBER_ATTN_V_STAGE=0 (read once).
bool value_staging() {
  static const bool on = env_switch("EMBER_ATTN_V_STAGE", true);
  return on;
}

// Whether cached_attention takes its vector path where it fits (CachedArgs::vectors): unless
// EMBER_ATTN_CACHED_VECTORS=0 (read once).
bool vector_path() {
  static const bool on = env_switch("EMBER_ATTN_CACHED_VECTORS", true);
  return on;
}

// Launches the split kernel (and the join kernel where the device has too few counters) over
// a's operands, its q, caches and output already set: out has `rows` query rows.
void launch(attn::CachedArgs& a, DType dtype, int64_t rows, Device device, const char* op) {
  const int dev = device.index;
  detail::use_device(dev);
  const int64_t splits = a.splits = attn::cached_splits(a.S);
  EMBER_CHECK(rows * splits < (int64_t(1) << 31), op, ": ", rows, " query rows over ", a.S,
              " cache slots are more blocks than one launch takes");
  visit<Kinds::Float>(dtype, op, [&]<class T>() {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const Tensor ws = make_tensor({attn::cached_workspace(rows, a.S, a.F)},
                                  std::is_same_v<C, double> ? DType::Float64 : DType::Float32,
                                  device);
    // Under 3 KB, whatever the head, and the staged values' 8 KB for a 16-bit head of 64.
    a.v_staged = attn::cached_v_stages(a.F, sizeof(T)) &&
                 reinterpret_cast<uintptr_t>(a.v) % 16 == 0 && value_staging();
    a.vectors = attn::cached_vectors_fit(a, sizeof(T)) && vector_path();
    const size_t smem = attn::cached_attention_smem<C>(a.F, a.vectors) +
                        (a.v_staged ? attn::cached_v_stage_bytes(a.F, sizeof(T)) : 0);
    C* w = static_cast<C*>(ws.impl()->data());
    // A row's last block joins it, counted in the device's counters (one launch), where there
    // are enough of them; else a second kernel joins the rows.
    a.counters = rows <= detail::kCounters ? detail::counters(dev) : nullptr;
    a.early = detail::early_dependents();
    detail::launch_after(a.vectors ? attn::cached_attention_split_kernel<T, C, true>
                                   : attn::cached_attention_split_kernel<T, C, false>,
                         dim3(unsigned(rows * splits)),
                         dim3(attn::kThreads), smem, detail::stream(dev), op, a, w);
    if (!a.counters) {
      attn::cached_attention_join_kernel<T, C>
          <<<unsigned(rows), attn::kThreads, attn::cached_join_smem<C>(),
             detail::stream(dev)>>>(a, w);
      detail::check(cudaGetLastError(), op);
    }
  });
}

// a's q, caches, sizes and output from the op's operands; false where nothing is to compute.
bool operands(attn::CachedArgs& a, Tensor q, const Tensor& k, const Tensor& v, const Tensor& pos,
              Tensor& out, double scale, int64_t* rows) {
  a.L = q.size(-2);
  a.E = q.size(-1);
  a.S = k.size(-2);
  a.F = v.size(-1);
  a.scale = scale;
  if (out.numel() == 0) return false;
  *rows = out.numel() / a.F;
  const int64_t batch = *rows / a.L;
  if (q.dim() > 4) q = q.contiguous().view({1, batch, a.L, a.E});
  attn::cached_q_layout(a, q);
  a.k = k.impl()->data();
  a.v = v.impl()->data();
  a.pos = static_cast<const int64_t*>(pos.impl()->data());
  a.out = out.impl()->data();
  return true;
}

void cached_attention(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  const Tensor k = in[1].is_contiguous() ? in[1] : in[1].contiguous(),
               v = in[2].is_contiguous() ? in[2] : in[2].contiguous();
  attn::CachedArgs a;
  int64_t rows = 0;
  if (!operands(a, in[0], k, v, in[3], out[0], attrs.value2, &rows)) return;
  launch(a, in[0].dtype(), rows, in[0].device(), "cached_attention");
}

}  // namespace

void register_cached_attention(KernelTable& t) {
  t[OpId::cached_attention] = cached_attention;
}

}  // namespace ember::cuda

namespace ember::cached_attention_append {

bool run(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& pos,
         const Tensor& put, const Tensor& k_new, const Tensor& v_new, double scale, Tensor& out) {
  const int64_t nd = k_cache.dim();
  if (nd < 2 || v_cache.dim() != nd || k_new.dim() != nd || v_new.dim() != nd ||
      !k_cache.is_contiguous() || !v_cache.is_contiguous() || put.dtype() != DType::Bool ||
      !put.is_contiguous() || put.numel() != k_cache.size(-2) || k_new.size(-2) != 1 ||
      v_new.size(-2) != 1 || k_new.size(-1) != k_cache.size(-1) ||
      v_new.size(-1) != v_cache.size(-1) || k_new.dtype() != k_cache.dtype() ||
      v_new.dtype() != v_cache.dtype() || k_cache.dtype() != q.dtype() ||
      v_cache.dtype() != q.dtype() || out.dtype() != q.dtype() || !out.is_contiguous())
    return false;
  // The caches' leading dims as [B0, B1] (B0 = 1 below 4 dims), matching q's layout of batch
  // entries; the new rows' strides over them.
  for (int64_t d = 0; d + 2 < nd; ++d)
    if (k_new.size(d) != k_cache.size(d) || v_new.size(d) != v_cache.size(d) ||
        v_cache.size(d) != k_cache.size(d))
      return false;
  if (nd > 4 || (nd == 4 && q.dim() != 4) || (nd == 3 && q.dim() != 3)) return false;
  cuda::attn::CachedArgs a;
  int64_t rows = 0;
  if (!cuda::operands(a, q, k_cache, v_cache, pos, out, scale, &rows)) return true;
  a.put = static_cast<const unsigned char*>(put.impl()->data());
  a.k_new = k_new.impl()->data();
  a.v_new = v_new.impl()->data();
  a.kn0 = nd == 4 ? k_new.stride(0) : 0;
  a.kn1 = nd >= 3 ? k_new.stride(nd - 3) : 0;
  a.kn3 = k_new.stride(nd - 1);
  a.vn0 = nd == 4 ? v_new.stride(0) : 0;
  a.vn1 = nd >= 3 ? v_new.stride(nd - 3) : 0;
  a.vn3 = v_new.stride(nd - 1);
  cuda::launch(a, q.dtype(), rows, q.device(), "cached_attention (with the cache write)");
  return true;
}

}  // namespace ember::cached_attention_append
