// The CUDA attention kernels (kernels/cuda/attention_fwd.cuh, attention_bwd.cuh,
// cached_attention.cuh) compiled for the host and run by the block emulator
// (cuda/emulated_kernels.h), against the CPU kernels of the same ops: tiling, masking, the online
// softmax, the dropout mask, strided and broadcast operands, both load paths and the decode
// step's appended slots are checked on machines without a GPU. (On a GPU, the op cases and
// tests/cuda/cuda_attention_test.cpp run the real kernels.) Builds where the CUDA headers are
// found, as they are with the CUDA backend.
#if __has_include(<cuda_bf16.h>)
#include "cuda/emulated_kernels.h"
// (after the emulated kernels, which must be the first to include the CUDA headers)
#include "capture/capture_test_util.h"

namespace ember::test {
namespace {

using emu::max_rel_error;
using emu::tolerance;

int g_tensor_core_launches = 0;  // launches of the 128-thread (tensor-core) kernels
int g_keep_launches = 0;         // launches of the keep flags' kernel

struct Emulated {
  template <class Args>
  void operator()(void (*kernel)(Args), int64_t blocks, size_t smem, const Args& args,
                  int threads = cuda::attn::kThreads) const {
    g_tensor_core_launches += threads == cuda::attn::mma::kThreads;
    g_keep_launches += threads == cuda::attn::mma::kKeepBitsThreads;
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

TEST(AttentionEmulation, DropoutFlagsPastTheLimitTakeTheFloatKernels) {
  // A 16-bit problem with dropout whose keep flags would take more than keep_bits_limit() runs
  // the float kernels (no tensor-core launch), with the same results; the forward's flags (one
  // layout) fitting where the backward's (two) do not splits the two.
  struct Limit {
    int64_t saved = cuda::attn::mma::keep_bits_limit();
    ~Limit() { cuda::attn::mma::keep_bits_limit() = saved; }
  } restore;
  const Config c{{2}, 130, 130, 64, 64, true, 0.2, DType::BFloat16};
  const int64_t tiles = 2 * 3 * 3, bytes = tiles * cuda::attn::mma::kKeepWords * 4;
  for (const int64_t limit : {int64_t(0), bytes}) {
    cuda::attn::mma::keep_bits_limit() = limit;
    const int before = g_tensor_core_launches;
    check(c);
    EXPECT_EQ(g_tensor_core_launches - before, limit == 0 ? 0 : 1) << "limit " << limit;
  }
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

TEST(AttentionEmulation, KeepFlagsDrawnAheadAreTheKernelsOwn) {
  // The attention_keep op's words (both layouts) from the kernel match its CPU reference word for
  // word; given to the forward and the backward as their extra input, the tensor-core kernels
  // draw nothing (no keep launch) and give exactly what they give drawing the flags themselves.
  for (bool causal : {false, true})
    for (const std::array<int64_t, 3> ls : {std::array<int64_t, 3>{2, 130, 130},
                                            std::array<int64_t, 3>{3, 70, 150}}) {
      const int64_t B = ls[0], L = ls[1], S = ls[2];
      SCOPED_TRACE(std::string(causal ? "causal " : "") + std::to_string(B) + " x " +
                   std::to_string(L) + " x " + std::to_string(S));
      const DType t = DType::BFloat16;
      manual_seed(uint64_t(L + S));
      const Tensor q = randn({B, L, 64}).to(t), k = randn({B, S, 64}).to(t),
                   v = randn({B, S, 64}).to(t), go = randn({B, L, 64}).to(t);
      Attrs a;  // a captured node's: the draws from the rng_state input
      a.flag = causal;
      a.value = 0.3;
      a.value2 = 0.125;
      Tensor rng = make_tensor({2}, DType::Int64, kCPU);
      static_cast<int64_t*>(rng.impl()->data())[0] = 777;
      static_cast<int64_t*>(rng.impl()->data())[1] = 4 * 5001;
      Attrs ka;
      ka.shape = {B, L, S};
      ka.value = a.value;
      ka.flag = causal;
      const int64_t n = attention_keep::words(B, L, S);
      // Every word written, hidden tiles' too: the buffer starts all ones.
      Tensor want = make_tensor({n}, DType::Int32), drawn = full({n}, -1.0, DType::Int32);
      const Tensor rng_in[1] = {rng};
      Tensor want_out[1] = {want};
      cpu::attention_keep(rng_in, want_out, ka);
      cuda::attn::Problem<float> p;
      p.batch = B;
      p.L = L;
      p.S = S;
      p.causal = causal;
      cuda::attn::set_dropout(p, ka, &rng, "test");
      const int keeps = g_keep_launches;
      cuda::attn::mma::draw_keep(p, static_cast<uint32_t*>(drawn.impl()->data()), Emulated{},
                                 "test");
      EXPECT_EQ(g_keep_launches - keeps, 1);
      EXPECT_TRUE(test::bits_equal(drawn, want)) << "the kernel's words against the CPU reference";

      const DType st = stats_dtype(t);
      Tensor own[2] = {make_tensor({B, L, 64}, t), make_tensor({B, L}, st)};
      Tensor ahead[2] = {make_tensor({B, L, 64}, t), make_tensor({B, L}, st)};
      const Tensor in4[4] = {q, k, v, rng}, in5[5] = {q, k, v, rng, want};
      int before = g_keep_launches;
      cuda::attn::forward(in4, own, a, Emulated{});
      EXPECT_EQ(g_keep_launches - before, 1) << "the forward drawing its own flags";
      before = g_keep_launches;
      const int cores = g_tensor_core_launches;
      cuda::attn::forward(in5, ahead, a, Emulated{});
      EXPECT_EQ(g_keep_launches - before, 0) << "the forward given the flags";
      EXPECT_EQ(g_tensor_core_launches - cores, 1);
      EXPECT_TRUE(test::bits_equal(ahead[0], own[0])) << "out";
      EXPECT_TRUE(test::bits_equal(ahead[1], own[1])) << "lse";

      const Tensor b7[7] = {q, k, v, own[0], own[1], go, rng},
                   b8[8] = {q, k, v, own[0], own[1], go, rng, want};
      Tensor gown[3] = {make_tensor(q.sizes(), t), make_tensor(k.sizes(), t),
                        make_tensor(v.sizes(), t)};
      Tensor gahead[3] = {make_tensor(q.sizes(), t), make_tensor(k.sizes(), t),
                          make_tensor(v.sizes(), t)};
      cuda::attn::backward(b7, gown, a, Emulated{});
      before = g_keep_launches;
      cuda::attn::backward(b8, gahead, a, Emulated{});
      EXPECT_EQ(g_keep_launches - before, 0) << "the backward given the flags";
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(test::bits_equal(gahead[i], gown[i])) << "grad " << i;
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
// shared memory where they fit, as a launch stages them (CachedArgs::v_staged); with vectors,
// the vector path where it fits, as a launch takes it (CachedArgs::vectors). Returns whether
// it took the vector path.
bool run_cached(cuda::attn::CachedArgs a, DType dtype, int64_t rows, bool stage_v = true,
                bool vectors = true) {
  const bool wide = dtype == DType::Float64;
  const Tensor ws = make_tensor({cuda::attn::cached_workspace(rows, a.S, a.F)},
                                wide ? DType::Float64 : DType::Float32);
  auto launch = [&]<class T>() {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    C* w = static_cast<C*>(ws.impl()->data());
    a.v_staged = stage_v && cuda::attn::cached_v_stages(a.F, sizeof(T));
    a.vectors = vectors && cuda::attn::cached_vectors_fit(a, sizeof(T));
    const size_t smem = cuda::attn::cached_attention_smem<C>(a.F, a.vectors) +
                        (a.v_staged ? cuda::attn::cached_v_stage_bytes(a.F, sizeof(T)) : 0);
    emu::run_blocks(rows * a.splits, cuda::attn::kThreads, smem, [&] {
      if (a.vectors) cuda::attn::cached_attention_split_kernel<T, C, true>(a, w);
      else cuda::attn::cached_attention_split_kernel<T, C, false>(a, w);
    });
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
  return a.vectors;
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
    for (const bool vectors : {true, false})
    for (const bool counted : {true, false})
      for (const bool stage_v : {true, false}) {
        std::vector<int> counters(size_t(rows), 0);
        a.counters = counted ? counters.data() : nullptr;
        got.fill_(NAN);
        const bool vectored = run_cached(a, c.dtype, rows, stage_v, vectors);
        // Heads of 64 in every dtype fit the vector path (a transposed q's strides too).
        if (vectors && c.E == 64 && c.F == 64) EXPECT_TRUE(vectored) << what;
        const std::string how = what + (counted ? " (joined by the last block)" : " (join kernel)") +
                                (stage_v ? "" : " (values not staged)") +
                                (vectored ? " (vectors)" : "");
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
  }
}

// The decode step's cache write joined to the attention (CachedArgs::put): the slots marked
// take the new key and value rows, written into the caches by the blocks of their splits, and
// the output is the op's over the written caches. The slot at the position, and slots past the
// visible ones too (written, never read), in a split that sees none and in one that sees some;
// two rows a batch entry; k_new and v_new read through the strides of a split of a wider tensor;
// on the vector path and the element path.
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
  for (const bool vectors : {true, false})
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
    // Every case fits the vector path (the new rows' strides too): both paths write the slots.
    EXPECT_EQ(run_cached(a, c.dtype, rows, true, vectors), vectors) << what;
    // The caches as the where writes them, bit for bit.
    EXPECT_EQ(k.to(DType::Float64).sub(k_want.to(DType::Float64)).abs().amax().item(), 0.0)
        << what << ": the keys' cache";
    EXPECT_EQ(v.to(DType::Float64).sub(v_want.to(DType::Float64)).abs().amax().item(), 0.0)
        << what << ": the values' cache";
    EXPECT_LE(max_rel_error(got, want), tolerance(c.dtype)) << what;
    EXPECT_EQ(counters, std::vector<int>(size_t(rows), 0)) << what;
  }
}

TEST(AttentionEmulation, NoKeysGiveZeroOutputAndMinusInfinity) {
  check({{2}, 5, 0, 4, 3, false, 0.0, DType::Float32});
  check({{2}, 5, 0, 4, 3, true, 0.5, DType::Float64});
}

}  // namespace
}  // namespace ember::test

#endif  // __has_include(<cuda_bf16.h>)
