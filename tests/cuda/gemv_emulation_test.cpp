// The few-rows product's CUDA kernels (kernels/cuda/gemv.cuh: the gemv and the columns-in-turn
// kernel, with the layer_norm before them) on the block emulator, against
// float64 sums and against each other bit for bit, on machines without a GPU. (On a GPU,
// tests/cuda/cuda_gemm_bias_test.cpp runs the real kernels.)
#if __has_include(<cuda_bf16.h>)
#include "cuda/emulated_kernels.h"

namespace ember::test {
namespace {

using emu::max_rel_error;
using emu::tolerance;

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
    Tensor want = make_tensor({1, c.N}, c.dtype), got = make_tensor({1, c.N}, c.dtype);
    want.fill_(NAN);
    got.fill_(NAN);
    auto run = [&]<class T>() {
      a.out = want.impl()->data();
      emu::run_blocks(cuda::gemv::blocks(c.N, 1), cuda::attn::kThreads, smem, [&] {
        if (c.ln) cuda::gemv::gemv_kernel<T, 1, true>(a);
        else cuda::gemv::gemv_kernel<T, 1>(a);
      });
      a.out = got.impl()->data();
      emu::run_blocks(2, cuda::attn::kThreads,
                      cuda::gemv::columns_shared_bytes(c.ln, c.K, dtype_size(c.dtype)), [&] {
        if (c.ln) cuda::gemv::columns_kernel<T, true>(a);
        else cuda::gemv::columns_kernel<T>(a);
      });
    };
    if (c.dtype == DType::Float32) run.template operator()<float>();
    else if (c.dtype == DType::Float16) run.template operator()<__half>();
    else run.template operator()<__nv_bfloat16>();
    EXPECT_EQ(got.to(DType::Float64).sub(want.to(DType::Float64)).abs().amax().item(), 0.0) << what;
    EXPECT_FALSE(std::isnan(got.to(DType::Float64).sum().item())) << what << ": a column not written";
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
    run_splits(a, c.dtype, smem, got, [&](int split) {
      // An element of the normalized rows may round the other way than float64's (one ulp of
      // the 16-bit type), moving the product by about as much as the type's rounding.
      EXPECT_LE(max_rel_error(got, want), 2 * tolerance(c.dtype)) << what << " split " << split;
    });
  }
}

}  // namespace
}  // namespace ember::test

#endif  // __has_include(<cuda_bf16.h>)
