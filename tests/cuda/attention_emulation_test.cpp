// The CUDA attention kernels (kernels/cuda/attention_fwd.cuh, attention_bwd.cuh) compiled for
// the host and run by the block emulator (support/block_emulator.h), against the CPU kernels of
// the same ops: tiling, masking, the online softmax, the dropout mask, strided and broadcast
// operands and both load paths are checked on machines without a GPU. (On a GPU, the op cases and
// tests/cuda/cuda_attention_test.cpp run the real kernels.) Builds where the CUDA headers are
// found, as they are with the CUDA backend.
#if __has_include(<cuda_bf16.h>)
#define EMBER_CUDA_EMULATION 1

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <string>
#include <vector>

#include "support/block_emulator.h"

// The kernels' primitives (attention_tiles.cuh), on the emulator.
namespace ember::cuda::attn {
inline int thread_index() {
  return test::emu::thread_index();
}
inline int64_t block_index() {
  return test::emu::block_index();
}
inline int64_t grid_blocks() {
  return test::emu::block_count();
}
inline void sync_block() {
  test::emu::barrier();
}
template <class C>
inline C shfl_xor(C v, int lane_mask) {
  return test::emu::exchange(v, lane_mask);
}
inline unsigned char* shared_memory() {
  return test::emu::shared_memory();
}
inline void thread_fence() {}  // blocks run one after another
inline int atomic_add(int* p, int v) {
  const int old = *p;
  *p = old + v;
  return old;
}
template <class C>
inline C load_shared_by_blocks(const C* p) {
  return *p;
}
inline void wait_for_prior_grids() {}  // launches run one after another
inline void allow_dependent_grids() {}
inline void prefetch_l2(const void*, unsigned) {}  // a hint: nothing to emulate
inline float exp_of(float x) {
  return std::exp(x);
}
inline double exp_of(double x) {
  return std::exp(x);
}
inline float log_of(float x) {
  return std::log(x);
}
inline double log_of(double x) {
  return std::log(x);
}
inline float max_of(float a, float b) {
  return std::fmax(a, b);
}
inline double max_of(double a, double b) {
  return std::fmax(a, b);
}
template <class V>
inline V load16(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}
template <class V>
inline void store16(void* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}
// The tensor-core primitives of attention_mma.cuh: each lane gathers what the warp's lanes hold
// and computes its own part of the result, as the PTX instructions define it.
inline float exp2_of(float x) {
  return std::exp2(x);
}
inline void copy16_async(void* dst, const void* src) {
  std::memcpy(dst, src, 16);  // lands at once: a barrier still separates it from its readers
}
inline void async_commit() {}
inline void async_wait() {}
inline void ldsm_emulated(uint32_t (&r)[4], const void* row, bool trans) {
  const std::array<const void*, 32> rows = test::emu::warp_gather(row);
  const int lane = thread_index() % 32, g = lane / 4, q = lane % 4;
  auto at = [&](int m, int i, int j) {  // element (i, j) of matrix m
    uint16_t x;
    std::memcpy(&x, static_cast<const unsigned char*>(rows[size_t(8 * m + i)]) + 2 * j, 2);
    return uint32_t(x);
  };
  for (int m = 0; m < 4; ++m)
    r[m] = trans ? at(m, 2 * q, g) | at(m, 2 * q + 1, g) << 16
                 : at(m, g, 2 * q) | at(m, g, 2 * q + 1) << 16;
}
inline void ldsm_x4(uint32_t (&r)[4], const void* row) {
  ldsm_emulated(r, row, false);
}
inline void ldsm_x4_t(uint32_t (&r)[4], const void* row) {
  ldsm_emulated(r, row, true);
}
template <class T>
inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  struct Frags {
    uint32_t a[4], b[2];
  };
  const std::array<Frags, 32> all = test::emu::warp_gather(Frags{{a[0], a[1], a[2], a[3]}, {b0, b1}});
  auto half = [](uint32_t w, int hi) {
    const auto x = static_cast<unsigned short>(hi ? w >> 16 : w & 0xFFFF);
    if constexpr (std::is_same_v<T, __half>)
      return __half2float(__ushort_as_half(x));
    else
      return __bfloat162float(__ushort_as_bfloat16(x));
  };
  // A (16 x 16) and B (16 x 8) elements from the lanes that hold them.
  auto A = [&](int i, int k) {
    return half(all[size_t(4 * (i % 8) + k % 8 / 2)].a[(i >= 8) + 2 * (k >= 8)], k % 2);
  };
  auto B = [&](int k, int j) { return half(all[size_t(4 * j + k % 8 / 2)].b[k >= 8], k % 2); };
  const int lane = thread_index() % 32, g = lane / 4, q = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const int i = g + 8 * (e / 2), j = 2 * q + e % 2;
    float s = d[e];
    for (int k = 0; k < 16; ++k) s += A(i, k) * B(k, j);
    d[e] = s;
  }
}
}  // namespace ember::cuda::attn

#include <gtest/gtest.h>

#include "core/make_tensor.h"
#include "core/shape.h"
#include "ember/ember.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention_bwd.cuh"
#include "kernels/cuda/attention_fwd.cuh"
#include "kernels/cuda/cached_attention.cuh"
#include "kernels/cuda/cached_attention_row.cuh"
#include "kernels/cuda/gemv.cuh"

namespace ember::test {
namespace {

int g_tensor_core_launches = 0;  // launches of the 128-thread (tensor-core) kernels

struct Emulated {
  template <class Args>
  void operator()(void (*kernel)(Args), int64_t blocks, size_t smem, const Args& args,
                  int threads = cuda::attn::kThreads) const {
    g_tensor_core_launches += threads == cuda::attn::mma::kThreads;
    emu::run_blocks(blocks, threads, smem, [&] { kernel(args); });
  }
};

struct Config {
  Shape batch;
  int64_t L, S, E, F;
  bool causal;
  double dropout;
  DType dtype;
  // How q, k, v are laid out: 0 contiguous, 1 heads interleaved as in the GPT (a transposed view
  // of [B, L, H, E]), 2 every other element of the last dim, 3 k and v broadcast along batch dim 0.
  int layout = 0;
  // The results (out, dq, dk, dv) written through [B, H, L, F] views of [B, L, H, F] tensors
  // (the heads-inner layout, kernels/attention_layout.h); batch {B, H} only.
  bool heads_inner_results = false;

  std::string str() const {
    return "batch " + shape_str(batch) + " L " + std::to_string(L) + " S " + std::to_string(S) +
           " E " + std::to_string(E) + " F " + std::to_string(F) + (causal ? " causal" : "") +
           " dropout " + std::to_string(dropout) + " " + std::string(dtype_name(dtype)) +
           " layout " + std::to_string(layout) + (heads_inner_results ? " heads-inner results" : "");
  }
};

Shape with(Shape batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

// Values in [-2, 2) of `shape` in c.layout's layout (randn-like scale, fixed by the seed).
Tensor make_input(const Config& c, const Shape& shape, bool shared) {
  NoGradGuard no_grad;
  auto draw = [&](const Shape& s) { return (rand(s, DType::Float64) * 4.0 - 2.0).to(c.dtype); };
  const int64_t nb = int64_t(c.batch.size());
  if (c.layout == 1 && nb == 2) {
    // [B, H, rows, cols] as the view of [B, rows, H, cols]
    Tensor base = draw({shape[0], shape[2], shape[1], shape[3]});
    return base.transpose(1, 2);
  }
  if (c.layout == 2) {
    Shape wide = shape;
    wide.back() *= 2;
    Tensor v = zeros(wide, c.dtype).slice(-1, 0, wide.back(), 2);
    v.copy_(draw(shape));
    return v;
  }
  if (c.layout == 3 && shared) {
    Shape one = shape;
    one[0] = 1;
    return draw(one).expand(shape);
  }
  return draw(shape);
}

// max |got - want| / (1 + |want|); infinite when only one of them is infinite or NaN.
double max_rel_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] == w[i]) continue;  // equal infinities included
    const double e = std::abs(g[i] - w[i]) / (1 + std::abs(w[i]));
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

double tolerance(DType t) {
  switch (t) {
    case DType::Float64:
      return 1e-10;
    case DType::Float32:
      return 2e-5;
    case DType::Float16:
      return 2e-3;
    default:
      return 1.6e-2;  // bfloat16 outputs: a rounding of 2^-8 relative
  }
}

Attrs attrs_of(const Config& c) {
  Attrs a;
  a.flag = c.causal;
  a.value = c.dropout;
  a.value2 = 1.0 / std::sqrt(double(c.E));
  a.seed = 1234567;
  a.offset = 4 * 77;
  return a;
}

DType stats_dtype(DType t) {
  return t == DType::Float64 ? t : DType::Float32;
}

void check(const Config& c) {
  SCOPED_TRACE(c.str());
  manual_seed(uint64_t(c.L * 1000 + c.S * 10 + c.E));
  const Tensor q = make_input(c, with(c.batch, c.L, c.E), false);
  const Tensor k = make_input(c, with(c.batch, c.S, c.E), true);
  const Tensor v = make_input(c, with(c.batch, c.S, c.F), true);
  const Tensor go = make_input(c, with(c.batch, c.L, c.F), false);
  const Attrs a = attrs_of(c);
  const Tensor in[3] = {q, k, v};
  Shape lse_shape = c.batch;
  lse_shape.push_back(c.L);
  Tensor want[2] = {make_tensor(with(c.batch, c.L, c.F), c.dtype),
                    make_tensor(lse_shape, stats_dtype(c.dtype))};
  // A result of `shape` [..., rows, cols], or with heads_inner_results the [B, H, rows, cols]
  // view of a [B, rows, H, cols] tensor.
  auto result = [&](const Shape& shape) {
    if (!c.heads_inner_results) return make_tensor(shape, c.dtype);
    return make_tensor({shape[0], shape[2], shape[1], shape[3]}, c.dtype).transpose(1, 2);
  };
  Tensor got[2] = {result(with(c.batch, c.L, c.F)), make_tensor(lse_shape, stats_dtype(c.dtype))};
  cpu::attention(in, want, a);
  cuda::attn::forward(in, got, a, Emulated{});
  const double tol = tolerance(c.dtype);
  EXPECT_LE(max_rel_error(got[0].contiguous(), want[0]), tol) << "out";
  EXPECT_LE(max_rel_error(got[1], want[1]), c.dtype == DType::Float64 ? 1e-12 : 1e-5) << "lse";

  // The backward from the CPU's out and lse, so both compute from the same saved values.
  const Tensor bin[6] = {q, k, v, want[0], want[1], go};
  Tensor bwant[3] = {make_tensor(q.sizes(), c.dtype), make_tensor(k.sizes(), c.dtype),
                     make_tensor(v.sizes(), c.dtype)};
  Tensor bgot[3] = {result(q.sizes()), result(k.sizes()), result(v.sizes())};
  cpu::attention_backward(bin, bwant, a);
  cuda::attn::backward(bin, bgot, a, Emulated{});
  const char* names[3] = {"dq", "dk", "dv"};
  // Grads sum over many rows: a few roundings more than out.
  const double gtol = c.dtype == DType::Float64 ? 1e-9 : 4 * tol;
  for (int i = 0; i < 3; ++i)
    EXPECT_LE(max_rel_error(bgot[i].contiguous(), bwant[i]), gtol) << names[i];
}

TEST(AttentionEmulation, SmallShapesEveryDtype) {
  for (DType t : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16})
    for (bool causal : {false, true}) {
      check({{2, 3}, 5, 7, 8, 6, causal, 0.0, t});
      check({{3}, 9, 4, 3, 5, causal, 0.3, t});
    }
}

TEST(AttentionEmulation, SeveralTilesWithTheirEdges) {
  // Past one tile of rows and keys (64 for float, 32 for double), with partial last tiles.
  for (DType t : {DType::Float32, DType::Float64, DType::BFloat16})
    for (bool causal : {false, true}) {
      check({{2}, 70, 70, 16, 16, causal, 0.0, t});
      check({{1}, 65, 130, 32, 24, causal, 0.25, t});
      check({{1}, 100, 40, 16, 8, causal, 0.0, t});  // L > S: causal rows past S see every key
    }
}

TEST(AttentionEmulation, HeadTilesOf64And128) {
  check({{1}, 20, 33, 64, 64, true, 0.2, DType::Float32});
  check({{1}, 20, 33, 100, 72, false, 0.0, DType::Float32});
  check({{1}, 20, 33, 128, 128, true, 0.0, DType::BFloat16});
  check({{1}, 12, 20, 128, 40, true, 0.1, DType::Float64});
}

TEST(AttentionEmulation, StridedAndBroadcastOperands) {
  for (DType t : {DType::Float32, DType::BFloat16}) {
    check({{2, 3}, 40, 40, 16, 16, true, 0.2, t, 1});  // heads of a [B, L, H, E] tensor
    check({{2, 3}, 12, 17, 8, 8, false, 0.0, t, 2});   // every other element
    check({{2, 3}, 12, 17, 8, 16, true, 0.1, t, 3});   // k, v shared by batch dim 0
  }
}

// The heads-inner layout's results: out and the grads written through [B, H, L, F] views, by
// the float kernels and the tensor-core ones.
TEST(AttentionEmulation, ResultsWrittenThroughHeadsInnerViews) {
  for (DType t : {DType::Float32, DType::BFloat16, DType::Float16}) {
    Config c{{2, 3}, 40, 40, 64, 64, true, 0.2, t, 1};
    c.heads_inner_results = true;
    check(c);
    Config d{{2, 2}, 70, 50, 32, 32, false, 0.0, t, 0};
    d.heads_inner_results = true;
    check(d);
  }
}

TEST(AttentionEmulation, TensorCoreKernelsTake16BitHeadsUpTo64) {
  // Each config must run the forward and both backward kernels on the tensor-core path.
  auto on_tensor_cores = [](const Config& c) {
    const int before = g_tensor_core_launches;
    check(c);
    EXPECT_EQ(g_tensor_core_launches - before, c.S > 0 ? 3 : 2) << c.str();
  };
  for (DType t : {DType::BFloat16, DType::Float16})
    for (bool causal : {false, true}) {
      on_tensor_cores({{2}, 130, 130, 64, 64, causal, 0.0, t});    // GPT heads, partial tiles
      on_tensor_cores({{1}, 70, 150, 32, 16, causal, 0.25, t});    // dropout, E != F
      on_tensor_cores({{1}, 150, 40, 8, 24, causal, 0.0, t});      // L > S
      on_tensor_cores({{2, 3}, 40, 40, 16, 16, causal, 0.2, t, 1});  // heads of [B, L, H, E]
      on_tensor_cores({{2, 3}, 12, 17, 8, 16, causal, 0.1, t, 3});   // k, v broadcast
    }
  on_tensor_cores({{2}, 5, 0, 8, 8, true, 0.5, DType::BFloat16});  // no keys
}

TEST(AttentionEmulation, DropoutDrawsFromAnRngStateInput) {
  // The op's optional rng_state input (what capture passes) replaces the attrs' seed and offset:
  // the kernels read it from memory and keep the elements the attrs would keep.
  for (DType t : {DType::Float32, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(t));
    manual_seed(9);
    const Tensor q = randn({2, 70, 64}).to(t), k = randn({2, 90, 64}).to(t),
                 v = randn({2, 90, 64}).to(t), go = randn({2, 70, 64}).to(t);
    Attrs a;
    a.flag = true;
    a.value = 0.25;
    a.value2 = 0.125;
    a.seed = 424242;
    a.offset = 4 * 1001;
    Attrs blank = a;  // what a captured node holds: no draws in its attrs
    blank.seed = blank.offset = 0;
    Tensor rng = make_tensor({2}, DType::Int64, kCPU);
    static_cast<int64_t*>(rng.impl()->data())[0] = int64_t(a.seed);
    static_cast<int64_t*>(rng.impl()->data())[1] = int64_t(a.offset);
    const DType st = stats_dtype(t);
    Tensor want[2] = {make_tensor({2, 70, 64}, t), make_tensor({2, 70}, st)};
    Tensor got[2] = {make_tensor({2, 70, 64}, t), make_tensor({2, 70}, st)};
    const Tensor in3[3] = {q, k, v}, in4[4] = {q, k, v, rng};
    cpu::attention(in3, want, a);
    cuda::attn::forward(in4, got, blank, Emulated{});
    EXPECT_LE(max_rel_error(got[0], want[0]), tolerance(t)) << "out";
    const Tensor b6[6] = {q, k, v, want[0], want[1], go},
                 b7[7] = {q, k, v, want[0], want[1], go, rng};
    Tensor bw[3] = {make_tensor(q.sizes(), t), make_tensor(k.sizes(), t), make_tensor(v.sizes(), t)};
    Tensor bg[3] = {make_tensor(q.sizes(), t), make_tensor(k.sizes(), t), make_tensor(v.sizes(), t)};
    cpu::attention_backward(b6, bw, a);
    cuda::attn::backward(b7, bg, blank, Emulated{});
    for (int i = 0; i < 3; ++i) EXPECT_LE(max_rel_error(bg[i], bw[i]), 4 * tolerance(t)) << i;
  }
}

// The split kernel's arguments for q, caches k [.., S, E] and v [.., S, F], pos and out, at the
// op's scale 1 / sqrt(E).
cuda::attn::CachedArgs cached_args(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& pos, const Tensor& out) {
  cuda::attn::CachedArgs a;
  cuda::attn::cached_q_layout(a, q);
  a.k = k.impl()->data();
  a.v = v.impl()->data();
  a.pos = static_cast<const int64_t*>(pos.impl()->data());
  a.out = out.impl()->data();
  a.S = k.size(-2);
  a.F = v.size(-1);
  a.scale = 1 / std::sqrt(double(k.size(-1)));
  a.splits = cuda::attn::cached_splits(a.S);
  return a;
}

// cached_attention's kernels on the emulator for `dtype`, over `rows` query rows: the split
// kernel, then the join kernel where a has no counters. With stage_v, the values are staged in
// shared memory where they fit, as a launch stages them (CachedArgs::v_staged).
void run_cached(cuda::attn::CachedArgs a, DType dtype, int64_t rows, bool stage_v = true) {
  const bool wide = dtype == DType::Float64;
  const Tensor ws = make_tensor({cuda::attn::cached_workspace(rows, a.S, a.F)},
                                wide ? DType::Float64 : DType::Float32);
  auto launch = [&]<class T>() {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    C* w = static_cast<C*>(ws.impl()->data());
    a.v_staged = stage_v && cuda::attn::cached_v_stages(a.F, sizeof(T));
    const size_t smem = cuda::attn::cached_attention_smem<C>() +
                        (a.v_staged ? cuda::attn::cached_v_stage_bytes(a.F, sizeof(T)) : 0);
    emu::run_blocks(rows * a.splits, cuda::attn::kThreads, smem,
                    [&] { cuda::attn::cached_attention_split_kernel<T, C>(a, w); });
    if (!a.counters)
      emu::run_blocks(rows, cuda::attn::kThreads, cuda::attn::cached_join_smem<C>(),
                      [&] { cuda::attn::cached_attention_join_kernel<T, C>(a, w); });
  };
  switch (dtype) {
    case DType::Float32: launch.operator()<float>(); break;
    case DType::Float64: launch.operator()<double>(); break;
    case DType::Float16: launch.operator()<__half>(); break;
    default: launch.operator()<__nv_bfloat16>();
  }
}

// The row kernel (cached_attention_row.cuh, a block a query row) on the emulator for `dtype`,
// staging `chunk` slots at a time. False where it does not take the head.
bool run_cached_rows(const cuda::attn::CachedArgs& a, DType dtype, int64_t rows, int64_t chunk) {
  bool ran = false;
  auto launch = [&]<class T>() {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    if (!cuda::attn::cached_row_fits(a.E, a.F, sizeof(T))) return;
    emu::run_blocks(rows, cuda::attn::kThreads,
                    cuda::attn::cached_row_smem<C>(chunk, a.E, a.F, sizeof(T)),
                    [&] { cuda::attn::cached_attention_row_kernel<T, C>(a, chunk); });
    ran = true;
  };
  switch (dtype) {
    case DType::Float64: launch.template operator()<double>(); break;
    case DType::Float32: launch.template operator()<float>(); break;
    case DType::Float16: launch.template operator()<__half>(); break;
    default: launch.template operator()<__nv_bfloat16>(); break;
  }
  return ran;
}

// cached_attention's kernel against the CPU kernel: q [B, H, L, E] as the decode step passes it
// (a transposed view of [B, L, H, E]) or 3-dim; positions at the caches' end, in their middle
// (later slots hold values a row must not see), past them, and before them (no slot seen);
// heads wider than a block's threads (the output's columns in two passes); caches of several
// splits, a row's visible slots ending inside one and the splits after it skipped.
TEST(AttentionEmulation, CachedAttentionKernelMatchesTheCpuKernel) {
  struct Case {
    Shape batch;
    int64_t L, S, E, F, pos;
    DType dtype;
  };
  const Case cases[] = {
      {{2, 3}, 1, 40, 64, 64, 39, DType::Float32},  {{2, 3}, 1, 40, 64, 64, 17, DType::BFloat16},
      {{1, 4}, 3, 33, 16, 8, 5, DType::Float64},    {{2}, 2, 9, 5, 300, 3, DType::Float32},
      {{2, 2}, 2, 12, 8, 8, 30, DType::Float16},    {{3}, 1, 6, 4, 4, -1, DType::Float32},
      {{1, 2}, 1, 200, 64, 64, 150, DType::BFloat16}, {{2}, 2, 130, 32, 16, 127, DType::Float32},
      {{1, 3}, 1, 256, 64, 64, 255, DType::Float64},
      // heads wider than a set of registers, values wider than a block, more splits than a
      // thread joins in one set
      {{1}, 1, 1100, 130, 300, 1090, DType::Float32},
  };
  for (const Case& c : cases) {
    manual_seed(uint64_t(c.S * 7 + c.E));
    const std::string what = "batch " + shape_str(c.batch) + " L " + std::to_string(c.L) +
                             " S " + std::to_string(c.S) + " E " + std::to_string(c.E) + " F " +
                             std::to_string(c.F) + " pos " + std::to_string(c.pos) + " " +
                             std::string(dtype_name(c.dtype));
    auto draw = [&](const Shape& s) { return (rand(s, DType::Float64) * 4.0 - 2.0).to(c.dtype); };
    Tensor q;
    if (c.batch.size() == 2)  // [B, H, L, E] as the view of [B, L, H, E]
      q = draw({c.batch[0], c.L, c.batch[1], c.E}).transpose(1, 2);
    else
      q = draw(with(c.batch, c.L, c.E));
    const Tensor k = draw(with(c.batch, c.S, c.E)), v = draw(with(c.batch, c.S, c.F));
    const Tensor pos = full({1}, double(c.pos), TensorOptions(DType::Int64));
    const Tensor want = cached_attention(q, k, v, pos);
    Tensor got = make_tensor(want.sizes(), c.dtype);
    cuda::attn::CachedArgs a = cached_args(q, k, v, pos, got);
    const int64_t rows = want.numel() / c.F;
    // The row's last block joins it (counted in `counters`), or a second kernel does; the values
    // staged in shared memory (where they fit) or read where they lie.
    Tensor staged;
    for (const bool counted : {true, false})
      for (const bool stage_v : {true, false}) {
        std::vector<int> counters(size_t(rows), 0);
        a.counters = counted ? counters.data() : nullptr;
        got.fill_(NAN);
        run_cached(a, c.dtype, rows, stage_v);
        const std::string how = what + (counted ? " (joined by the last block)" : " (join kernel)") +
                                (stage_v ? "" : " (values not staged)");
        EXPECT_LE(max_rel_error(got, want), tolerance(c.dtype)) << how;
        if (c.pos < 0) {
          EXPECT_EQ(got.abs().amax().item(), 0.0) << how;
        }
        EXPECT_EQ(counters, std::vector<int>(size_t(rows), 0)) << how << ": counters left at rest";
        // Staged values are the same products summed in the same order: the same output.
        if (stage_v) {
          staged = got.to(DType::Float64);
        } else if (c.pos >= 0) {
          EXPECT_EQ(got.to(DType::Float64).sub(staged).abs().amax().item(), 0.0) << how;
        }
      }
    // The row kernel, its chunks a split's slots (several a row) or all of them at once.
    for (const int64_t chunk : {int64_t(cuda::attn::kChunk), cuda::attn::kChunk * ((c.S + 63) / 64)}) {
      got.fill_(NAN);
      if (!run_cached_rows(a, c.dtype, rows, chunk)) break;
      const std::string how = what + " (a block a row, chunks of " + std::to_string(chunk) + ")";
      EXPECT_LE(max_rel_error(got, want), tolerance(c.dtype)) << how;
      if (c.pos < 0) {
        EXPECT_EQ(got.abs().amax().item(), 0.0) << how;
      }
    }
  }
}

// The decode step's cache write joined to the attention (CachedArgs::put): the slots marked
// take the new key and value rows, written into the caches by the blocks of their splits, and
// the output is the op's over the written caches. The slot at the position, and slots past the
// visible ones too (written, never read), in a split that sees none and in one that sees some;
// two rows a batch entry; k_new and v_new read through the strides of a split of a wider tensor.
TEST(AttentionEmulation, CachedAttentionWritesTheAppendedSlots) {
  struct Case {
    int64_t B, H, L, S, E, pos;
    std::vector<int64_t> put;
    DType dtype;
  };
  const Case cases[] = {
      {1, 3, 1, 200, 64, 150, {150, 195}, DType::BFloat16},
      {2, 2, 1, 130, 16, 64, {64, 100}, DType::Float32},
      {1, 2, 2, 70, 8, 10, {10, 11}, DType::Float64},
  };
  for (const Case& c : cases) {
    manual_seed(uint64_t(c.S + c.E));
    const std::string what = "B " + std::to_string(c.B) + " H " + std::to_string(c.H) + " L " +
                             std::to_string(c.L) + " S " + std::to_string(c.S) + " pos " +
                             std::to_string(c.pos) + " " + std::string(dtype_name(c.dtype));
    auto draw = [&](const Shape& s) { return (rand(s, DType::Float64) * 4.0 - 2.0).to(c.dtype); };
    const Tensor q = draw({c.B, c.H, c.L, c.E});
    Tensor k = draw({c.B, c.H, c.S, c.E}), v = draw({c.B, c.H, c.S, c.E});
    // The new rows as the decode step has them: [B, H, 1, E] views of a [B, 1, 3H, E] product.
    const Tensor fresh = draw({c.B, 1, 3 * c.H, c.E});
    const Tensor k_new = fresh.slice(2, c.H, 2 * c.H).transpose(1, 2),
                 v_new = fresh.slice(2, 2 * c.H, 3 * c.H).transpose(1, 2);
    std::vector<double> marks(size_t(c.S), 0.0);
    for (int64_t s : c.put) marks[size_t(s)] = 1.0;
    const Tensor put = from_vector(marks, {c.S}).to(DType::Bool);
    const Tensor pos = full({1}, double(c.pos), TensorOptions(DType::Int64));
    const Tensor here = put.view({1, 1, c.S, 1});
    const Tensor k_want = where(here, k_new, k), v_want = where(here, v_new, v);
    const Tensor want = cached_attention(q, k_want, v_want, pos);
    Tensor got = make_tensor(want.sizes(), c.dtype);
    cuda::attn::CachedArgs a = cached_args(q, k, v, pos, got);
    a.put = static_cast<const unsigned char*>(put.impl()->data());
    a.k_new = k_new.impl()->data();
    a.v_new = v_new.impl()->data();
    a.kn0 = k_new.stride(0);
    a.kn1 = k_new.stride(1);
    a.kn3 = k_new.stride(3);
    a.vn0 = v_new.stride(0);
    a.vn1 = v_new.stride(1);
    a.vn3 = v_new.stride(3);
    const int64_t rows = want.numel() / c.E;
    std::vector<int> counters(size_t(rows), 0);
    a.counters = counters.data();
    const Tensor k0 = k.clone(), v0 = v.clone();
    run_cached(a, c.dtype, rows);
    // The caches as the where writes them, bit for bit.
    EXPECT_EQ(k.to(DType::Float64).sub(k_want.to(DType::Float64)).abs().amax().item(), 0.0)
        << what << ": the keys' cache";
    EXPECT_EQ(v.to(DType::Float64).sub(v_want.to(DType::Float64)).abs().amax().item(), 0.0)
        << what << ": the values' cache";
    EXPECT_LE(max_rel_error(got, want), tolerance(c.dtype)) << what;
    EXPECT_EQ(counters, std::vector<int>(size_t(rows), 0)) << what;
    // The row kernel (a block a row), from the caches as they were, a split's slots a chunk or
    // all at once: the same caches, the op's output.
    for (const int64_t chunk : {int64_t(cuda::attn::kChunk), cuda::attn::kChunk * ((c.S + 63) / 64)}) {
      k.copy_(k0);
      v.copy_(v0);
      got.fill_(NAN);
      if (!run_cached_rows(a, c.dtype, rows, chunk)) break;
      const std::string how = what + " (a block a row, chunks of " + std::to_string(chunk) + ")";
      EXPECT_EQ(k.to(DType::Float64).sub(k_want.to(DType::Float64)).abs().amax().item(), 0.0)
          << how << ": the keys' cache";
      EXPECT_EQ(v.to(DType::Float64).sub(v_want.to(DType::Float64)).abs().amax().item(), 0.0)
          << how << ": the values' cache";
      EXPECT_LE(max_rel_error(got, want), tolerance(c.dtype)) << how;
    }
  }
}

TEST(AttentionEmulation, NoKeysGiveZeroOutputAndMinusInfinity) {
  check({{2}, 5, 0, 4, 3, false, 0.0, DType::Float32});
  check({{2}, 5, 0, 4, 3, true, 0.5, DType::Float64});
}

// One block of the gemv kernel for a.M rows (with the layer_norm where a asks for it).
template <class T, bool kLn = false>
void gemv_block(const cuda::gemv::Args& a) {
  if constexpr (!kLn && sizeof(T) == 2) {
    if (a.ln_threads > 0) return gemv_block<T, true>(a);
  }
  switch (a.M) {
    case 1: return cuda::gemv::gemv_kernel<T, 1, kLn>(a);
    case 2: return cuda::gemv::gemv_kernel<T, 2, kLn>(a);
    case 3: return cuda::gemv::gemv_kernel<T, 3, kLn>(a);
    default: return cuda::gemv::gemv_kernel<T, 4, kLn>(a);
  }
}

// The gemv's operands: x's rows (ldx apart) times w ([N, K], rows K apart).
cuda::gemv::Args gemv_args(const Tensor& x, const Tensor& w, int64_t ldx) {
  cuda::gemv::Args a;
  a.x = x.impl()->data();
  a.w = w.impl()->data();
  a.M = x.size(0);
  a.N = w.size(0);
  a.K = w.size(1);
  a.ldx = ldx;
  a.ldw = a.K;
  return a;
}

// a's product in `got` by the emulated blocks, for one, two and four warps a column, each run
// judged by `check(split)`. smem: the launch's shared memory.
template <class Check>
void run_splits(cuda::gemv::Args a, DType dtype, size_t smem, Tensor& got, const Check& check) {
  for (const int split : {1, 2, 4}) {
    a.split = split;
    got.fill_(NAN);
    emu::run_blocks(cuda::gemv::blocks(a.N, split), cuda::attn::kThreads, smem, [&] {
      switch (dtype) {
        case DType::Float32: return gemv_block<float>(a);
        case DType::Float16: return gemv_block<__half>(a);
        default: return gemv_block<__nv_bfloat16>(a);
      }
    });
    check(split);
  }
}

// The few-rows product's kernel against float64 sums: 1 to 4 rows; rows aligned for 16-byte
// vectors and rows that are not (an odd k, a row stride off the vector); more columns than a
// block has warps (the last block's spare warps idle); with and without bias and residual, and
// with the product rounded before them; the gelu of product + bias; one, two and four warps a
// column.
TEST(GemvEmulation, FewRowProductsMatchFloat64Sums) {
  struct Case {
    int64_t M, N, K, x_pad;
    bool bias, residual, round_product;
    DType dtype;
    bool gelu = false;
  };
  const Case cases[] = {
      {1, 20, 64, 0, false, false, false, DType::BFloat16},
      {3, 9, 40, 0, true, false, false, DType::Float16},
      {4, 11, 37, 0, true, true, false, DType::Float32},
      {2, 17, 64, 3, true, true, false, DType::BFloat16},
      {1, 8, 256, 0, true, false, false, DType::Float32},
      {4, 5, 8, 0, false, true, false, DType::Float16},
      {2, 12, 64, 0, true, true, true, DType::BFloat16},
      {1, 10, 64, 0, true, false, true, DType::BFloat16, true},
      {3, 7, 24, 0, true, false, true, DType::Float16, true},
      // k longer than one set of loads a lane (vectors, then elements)
      {1, 6, 2056, 0, true, true, false, DType::BFloat16},
      {2, 5, 1031, 0, true, false, false, DType::Float32},
  };
  for (const Case& c : cases) {
    manual_seed(uint64_t(c.N * 13 + c.K));
    const std::string what = "M " + std::to_string(c.M) + " N " + std::to_string(c.N) + " K " +
                             std::to_string(c.K) + " pad " + std::to_string(c.x_pad) + " " +
                             std::string(dtype_name(c.dtype));
    auto draw = [&](const Shape& s) { return (rand(s, DType::Float64) * 2.0 - 1.0).to(c.dtype); };
    // x's rows K + x_pad apart: a slice of a wider tensor.
    const Tensor xw = draw({c.M, c.K + c.x_pad}), x = xw.slice(1, 0, c.K);
    const Tensor w = draw({c.N, c.K}), bias = draw({c.N}), res = draw({c.M, c.N});
    Tensor want = matmul(x.to(DType::Float64), w.to(DType::Float64).t());
    if (c.round_product) want = want.to(c.dtype).to(DType::Float64);  // as the op stores it
    if (c.bias) want = want + bias.to(DType::Float64);
    if (c.gelu) want = gelu(want);
    if (c.residual) want = want + res.to(DType::Float64);
    Tensor got = make_tensor({c.M, c.N}, c.dtype);
    cuda::gemv::Args a = gemv_args(x, w, c.K + c.x_pad);
    a.bias = c.bias ? bias.impl()->data() : nullptr;
    a.residual = c.residual ? res.impl()->data() : nullptr;
    a.out = got.impl()->data();
    a.round_product = c.round_product;
    a.gelu = c.gelu;
    const int64_t v = 16 / int64_t(dtype_size(c.dtype));
    a.vectors = c.K % v == 0 && a.ldx % v == 0;
    run_splits(a, c.dtype, cuda::gemv::kSharedBytes, got, [&](int split) {
      EXPECT_LE(max_rel_error(got, want), tolerance(c.dtype)) << what << " split " << split;
    });
  }
}

// The columns-in-turn kernel (on unless EMBER_GEMV_COLUMNS=0, the logits' projection) against the gemv
// kernel, bit for bit: a grid of two blocks (16 warps) over 37 and 100 columns, so that warps
// take several columns and the last round has idle warps; with bias, residual, the product
// rounded, the gelu; 16-bit and float32 rows of one set of loads; a layer_norm before the
// product (ln_f before the logits), made in every block as the gemv kernel makes it.
TEST(GemvEmulation, ColumnsInTurnGiveTheGemvKernelsBits) {
  struct Case {
    int64_t N, K;
    DType dtype;
    bool bias, residual, round_product, gelu;
    bool ln = false;
  };
  const Case cases[] = {
      {37, 64, DType::BFloat16, false, false, false, false},
      {100, 768, DType::BFloat16, true, true, true, false},
      {37, 40, DType::Float16, true, false, true, true},
      {100, 256, DType::Float32, true, true, false, false},
      {100, 768, DType::BFloat16, false, false, true, false, true},
      {37, 640, DType::Float16, true, false, true, false, true},
  };
  for (const Case& c : cases) {
    manual_seed(uint64_t(c.N + c.K));
    const std::string what = "N " + std::to_string(c.N) + " K " + std::to_string(c.K) + " " +
                             std::string(dtype_name(c.dtype));
    auto draw = [&](const Shape& s) { return (rand(s, DType::Float64) * 2.0 - 1.0).to(c.dtype); };
    const Tensor x = draw({1, c.K}), w = draw({c.N, c.K}), bias = draw({c.N}), res = draw({1, c.N});
    const Tensor ln_w = draw({c.K}), ln_b = draw({c.K});
    cuda::gemv::Args a = gemv_args(x, w, c.K);
    a.bias = c.bias ? bias.impl()->data() : nullptr;
    a.residual = c.residual ? res.impl()->data() : nullptr;
    a.round_product = c.round_product;
    a.gelu = c.gelu;
    a.vectors = true;
    size_t smem = cuda::gemv::kSharedBytes;
    if (c.ln) {
      a.ln_threads = cuda::gemv::layer_norm_threads(c.K);
      a.ln_w = ln_w.impl()->data();
      a.ln_b = ln_b.impl()->data();
      a.ln_eps = 1e-5f;
      smem += cuda::gemv::layer_norm_shared_bytes(1, c.K, dtype_size(c.dtype));
    }
    ASSERT_TRUE(cuda::gemv::columns_in_turn_fit(a, dtype_size(c.dtype))) << what;
    Tensor want = make_tensor({1, c.N}, c.dtype), got = make_tensor({1, c.N}, c.dtype),
           deep = make_tensor({1, c.N}, c.dtype);
    want.fill_(NAN);
    got.fill_(NAN);
    deep.fill_(NAN);
    auto run = [&]<class T>() {
      a.out = want.impl()->data();
      emu::run_blocks(cuda::gemv::blocks(c.N, 1), cuda::attn::kThreads, smem, [&] {
        if (c.ln) cuda::gemv::gemv_kernel<T, 1, true>(a);
        else cuda::gemv::gemv_kernel<T, 1>(a);
      });
      a.out = got.impl()->data();
      emu::run_blocks(2, cuda::attn::kThreads, smem, [&] {
        if (c.ln) cuda::gemv::columns_kernel<T, true>(a);
        else cuda::gemv::columns_kernel<T>(a);
      });
      // Three columns in flight a warp: the same bits again.
      a.out = deep.impl()->data();
      emu::run_blocks(2, cuda::attn::kThreads, smem, [&] {
        if (c.ln) cuda::gemv::columns_kernel<T, true, 3>(a);
        else cuda::gemv::columns_kernel<T, false, 3>(a);
      });
    };
    if (c.dtype == DType::Float32) run.template operator()<float>();
    else if (c.dtype == DType::Float16) run.template operator()<__half>();
    else run.template operator()<__nv_bfloat16>();
    EXPECT_EQ(got.to(DType::Float64).sub(want.to(DType::Float64)).abs().amax().item(), 0.0) << what;
    EXPECT_FALSE(std::isnan(got.to(DType::Float64).sum().item())) << what << ": a column not written";
    EXPECT_EQ(deep.to(DType::Float64).sub(want.to(DType::Float64)).abs().amax().item(), 0.0)
        << what << ", three columns in flight";
    EXPECT_FALSE(std::isnan(deep.to(DType::Float64).sum().item()))
        << what << ", three columns in flight: a column not written";
  }
}

// The few-rows product with the layer_norm before it done in its blocks (Args::ln_threads):
// against the op's layer_norm (float64, rounded to the 16-bit type as the op stores it) times
// the weight in float64, plus bias; rows of 768, of 1000 (the last thread's second chunk cut)
// and of 2056 (160 threads), one to four rows, one, two and four warps a column.
TEST(GemvEmulation, LayerNormedRowsThenTheProductMatchTheOps) {
  struct Case {
    int64_t M, N, K;
    DType dtype;
  };
  for (const Case& c : {Case{1, 20, 768, DType::BFloat16}, Case{3, 9, 1000, DType::BFloat16},
                        Case{2, 7, 2056, DType::Float16}, Case{4, 5, 768, DType::Float16}}) {
    manual_seed(uint64_t(c.K + c.M));
    const std::string what = "M " + std::to_string(c.M) + " N " + std::to_string(c.N) + " K " +
                             std::to_string(c.K) + " " + std::string(dtype_name(c.dtype));
    auto draw = [&](const Shape& s, double scale, double shift) {
      return (rand(s, DType::Float64) * scale + shift).to(c.dtype);
    };
    const Tensor x = draw({c.M, c.K}, 6.0, -2.0), lw = draw({c.K}, 1.0, 0.5),
                 lb = draw({c.K}, 1.0, -0.5), w = draw({c.N, c.K}, 2.0, -1.0),
                 bias = draw({c.N}, 2.0, -1.0);
    const Tensor normed =
        layer_norm(x.to(DType::Float64), {c.K}, lw.to(DType::Float64), lb.to(DType::Float64), 1e-5)
            .to(c.dtype);  // as the op stores it
    const Tensor want = matmul(normed.to(DType::Float64), w.to(DType::Float64).t())
                            .to(c.dtype)
                            .to(DType::Float64) +
                        bias.to(DType::Float64);
    Tensor got = make_tensor({c.M, c.N}, c.dtype);
    cuda::gemv::Args a = gemv_args(x, w, c.K);
    a.bias = bias.impl()->data();
    a.out = got.impl()->data();
    a.round_product = true;
    a.vectors = c.K % 8 == 0;
    a.ln_threads = cuda::gemv::layer_norm_threads(c.K);
    a.ln_w = lw.impl()->data();
    a.ln_b = lb.impl()->data();
    a.ln_eps = 1e-5f;
    const size_t smem = cuda::gemv::kSharedBytes +
                        cuda::gemv::layer_norm_shared_bytes(c.M, c.K, dtype_size(c.dtype));
    std::vector<Tensor> plain;
    run_splits(a, c.dtype, smem, got, [&](int split) {
      // An element of the normalized rows may round the other way than float64's (one ulp of
      // the 16-bit type), moving the product by about as much as the type's rounding.
      EXPECT_LE(max_rel_error(got, want), 2 * tolerance(c.dtype)) << what << " split " << split;
      plain.push_back(got.clone());
    });
    // The weights staged in shared memory (Args::staged), where a lane's share is one set of
    // loads: the same bits.
    cuda::gemv::Args s = a;
    s.staged = true;
    size_t at = 0;
    run_splits(s, c.dtype, smem + cuda::gemv::kStagedBytes, got, [&](int split) {
      const Tensor& before = plain[at++];
      if (!a.vectors || !cuda::gemv::stages_fit(c.K, split, dtype_size(c.dtype))) return;
      EXPECT_EQ(got.to(DType::Float64).sub(before.to(DType::Float64)).abs().amax().item(), 0.0)
          << what << " split " << split << ", weights staged";
    });
  }
}

}  // namespace
}  // namespace ember::test

#endif  // __has_include(<cuda_bf16.h>)
