// The gemm with its bias add in the epilogue (kernels/gemm_bias.h), what compiled GPU graphs run
// for a 16-bit matmul followed by a bias add: against the float64 product plus bias, within an
// ulp of the 16-bit result and no further from it than the eager ops, for a weight read as it
// lies and through a transposed view, with a residual added as the gemm's C operand, and
// declining what it does not take; and matmul with a few rows, which the gemv kernel runs.
#include <gtest/gtest.h>

#include <cmath>

#include "ember/cuda.h"
#include "ember/ember.h"
#include "kernels/gemm_bias.h"

namespace ember::test {
namespace {

const Device kGpu{DeviceType::CUDA, 0};

TEST(CudaOps, GemmWithBiasEpilogueMatchesTheFloat64Product) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  NoGradGuard no_grad;
  for (DType t : {DType::BFloat16, DType::Float16})
    for (bool transposed : {false, true})
      for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{96, 64, 80}, {1000, 768, 2304}}) {
        manual_seed(uint64_t(m + k + n));
        const Tensor a = randn({2, m, k}).to(t).to(kGpu);
        const Tensor w = randn({n, k}).to(t).to(kGpu);  // a linear layer's weight
        const Tensor b = transposed ? w.t() : w.t().contiguous();
        const Tensor bias = randn({n}).to(t).to(kGpu);
        TensorOptions o(t);
        o.device = kGpu;
        const Tensor out = empty({2, m, n}, o);
        const std::string what = std::string(dtype_name(t)) + (transposed ? " w.t()" : " [k, n]") +
                                 " " + std::to_string(m) + "x" + std::to_string(k) + "x" +
                                 std::to_string(n);
        ASSERT_TRUE(gemm_bias::run(a, b, bias, out)) << what;
        const Tensor want = matmul(a.cpu().to(DType::Float64), b.cpu().to(DType::Float64)) +
                            bias.cpu().to(DType::Float64);
        const Tensor got = out.cpu().to(DType::Float64);
        // Within an ulp of the result (at most 2^-7 relative for bfloat16, 2^-10 for float16),
        // plus the float32 sums' own error.
        const double ulp = t == DType::BFloat16 ? 0x1p-7 : 0x1p-10;
        const Tensor err = (got - want).abs() - (want.abs() * ulp + 1e-3);
        EXPECT_LE(err.amax().item(), 0.0) << what;
        // No worse than the eager ops, which round the product and then the sum.
        const Tensor eager = (matmul(a, b) + bias).cpu().to(DType::Float64);
        EXPECT_LE((got - want).abs().amax().item(),
                  (eager - want).abs().amax().item() * (1 + 1e-9))
            << what;
      }
}

// x + linear(y), as a residual block adds it: the residual is the gemm's C operand.
TEST(CudaOps, GemmWithBiasAndResidualMatchesTheFloat64Sum) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  NoGradGuard no_grad;
  for (DType t : {DType::BFloat16, DType::Float16})
    for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{5, 3072, 768}, {300, 768, 768}}) {
      manual_seed(uint64_t(m + k + n + 1));
      const Tensor a = randn({1, m, k}).to(t).to(kGpu);
      const Tensor b = randn({n, k}).to(t).to(kGpu).t();
      const Tensor bias = randn({n}).to(t).to(kGpu);
      const Tensor x = (randn({1, m, n}) * 4.0).to(t).to(kGpu);
      TensorOptions o(t);
      o.device = kGpu;
      const Tensor out = empty({1, m, n}, o);
      const std::string what = std::string(dtype_name(t)) + " " + std::to_string(m) + "x" +
                               std::to_string(k) + "x" + std::to_string(n);
      ASSERT_TRUE(gemm_bias::run(a, b, bias, out, x)) << what;
      const Tensor want = matmul(a.cpu().to(DType::Float64), b.cpu().to(DType::Float64)) +
                          bias.cpu().to(DType::Float64) + x.cpu().to(DType::Float64);
      const Tensor got = out.cpu().to(DType::Float64);
      const double ulp = t == DType::BFloat16 ? 0x1p-7 : 0x1p-10;
      EXPECT_LE(((got - want).abs() - (want.abs() * ulp + 1e-3)).amax().item(), 0.0) << what;
      // No worse than the eager ops, which round the product, the biased sum and the total.
      const Tensor eager = (x + (matmul(a, b) + bias)).cpu().to(DType::Float64);
      EXPECT_LE((got - want).abs().amax().item(),
                (eager - want).abs().amax().item() * (1 + 1e-9))
          << what;
      // A residual of another shape or dtype is declined, with nothing written.
      EXPECT_FALSE(gemm_bias::run(a, b, bias, out, x.slice(2, 0, n - 1).contiguous()));
      EXPECT_FALSE(gemm_bias::run(a, b, bias, out, x.to(DType::Float32)));
    }
}

TEST(CudaOps, GemmWithBiasEpilogueDeclinesWhatItDoesNotTake) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  NoGradGuard no_grad;
  auto gpu = [](const Tensor& x, DType t) { return x.to(t).to(kGpu); };
  TensorOptions o(DType::BFloat16);
  o.device = kGpu;
  const Tensor a = gpu(randn({8, 16}), DType::BFloat16), b = gpu(randn({16, 24}), DType::BFloat16);
  const Tensor bias = gpu(randn({24}), DType::BFloat16), out = empty({8, 24}, o);
  // float32 operands, a bias of another dtype, a wrong bias length, a's rows not contiguous.
  TensorOptions of(DType::Float32);
  of.device = kGpu;
  EXPECT_FALSE(gemm_bias::run(gpu(randn({8, 16}), DType::Float32),
                              gpu(randn({16, 24}), DType::Float32),
                              gpu(randn({24}), DType::Float32), empty({8, 24}, of)));
  EXPECT_FALSE(gemm_bias::run(a, b, gpu(randn({24}), DType::Float16), out));
  EXPECT_FALSE(gemm_bias::run(a, b, gpu(randn({23}), DType::BFloat16), out));
  EXPECT_FALSE(gemm_bias::run(gpu(randn({16, 8}), DType::BFloat16).t(), b, bias, out));
  // What it declines it leaves unwritten.
  const Tensor marked = full({8, 24}, 7.0, o);
  EXPECT_FALSE(gemm_bias::run(a, b, gpu(randn({23}), DType::BFloat16), marked));
  EXPECT_EQ(marked.cpu().to(DType::Float32).amin().item(), 7.0);
}

// matmul with at most four rows against a weight read through w.t() (a decode step's linear
// layers) runs the gemv kernel: against the float64 product, for 16-byte-aligned rows and rows
// that are not (an odd k; x a slice of a wider tensor), rows from a batch dim, every float dtype
// it takes.
TEST(CudaOps, FewRowProductsMatchTheFloat64Product) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  NoGradGuard no_grad;
  for (DType t : {DType::Float32, DType::BFloat16, DType::Float16})
    for (auto [rows, k, n, pad] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 768, 2304, 0},
                                   {4, 3072, 768, 0}, {3, 37, 50, 0}, {2, 64, 300, 5},
                                   // a projection back to the width; the logits' (more columns
                                   // than a wave of blocks: the columns-in-turn kernel)
                                   {1, 768, 768, 0}, {1, 768, 50304, 0}})
      for (bool batched : {false, true}) {
        manual_seed(uint64_t(rows * 7 + k + n + pad));
        const Tensor wide = randn({rows, k + pad}).to(t).to(kGpu);
        Tensor x = wide.slice(1, 0, k);
        if (batched) x = x.contiguous().view({rows, 1, k});  // rows from the batch dim
        const Tensor w = randn({n, k}).to(t).to(kGpu);
        const Tensor got = matmul(x, w.t()).cpu().to(DType::Float64).reshape({rows, n});
        const Tensor want = matmul(x.cpu().to(DType::Float64).reshape({rows, k}),
                                   w.cpu().to(DType::Float64).t());
        const std::string what = std::string(dtype_name(t)) + " " + std::to_string(rows) + "x" +
                                 std::to_string(k) + "x" + std::to_string(n) + " pad " +
                                 std::to_string(pad) + (batched ? " batched" : "");
        // One rounding of the float sum to the dtype, plus the float sum's own error.
        const double ulp = t == DType::BFloat16 ? 0x1p-8 : t == DType::Float16 ? 0x1p-11 : 0x1p-23;
        const double sum_err = 1e-5 * std::sqrt(double(k));
        EXPECT_LE(((got - want).abs() - (want.abs() * ulp + sum_err)).amax().item(), 0.0) << what;
      }
}

// At most four rows against w.t() (a decode step's projections), gemm_bias::run takes the gemv
// kernel, which rounds the product as the matmul op stores it before adding: the biased product
// equals eager's matmul then add bit for bit, and with a residual it equals one float sum of the
// stored product, the bias and the residual, rounded once (what a compiled graph's fused add
// of the two gives); and it takes the exact gelu of the biased product.
TEST(CudaOps, FewRowGemmsWithBiasRoundAsTheOps) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  NoGradGuard no_grad;
  for (DType t : {DType::BFloat16, DType::Float16})
    for (auto [rows, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 768, 2304}, {4, 3072, 768},
                              {3, 37, 50}}) {
      manual_seed(uint64_t(rows + k + n + 2));
      const Tensor a = randn({rows, 1, k}).to(t).to(kGpu);
      const Tensor b = randn({n, k}).to(t).to(kGpu).t();
      const Tensor bias = randn({n}).to(t).to(kGpu);
      const Tensor x = (randn({rows, 1, n}) * 4.0).to(t).to(kGpu);
      ASSERT_TRUE(gemm_bias::rounds_product_first(rows, k, n, b.strides()));
      ASSERT_FALSE(gemm_bias::rounds_product_first(rows, k, n, b.contiguous().strides()));
      TensorOptions o(t);
      o.device = kGpu;
      const std::string what = std::string(dtype_name(t)) + " " + std::to_string(rows) + "x" +
                               std::to_string(k) + "x" + std::to_string(n);
      const Tensor product = matmul(a, b);  // as the op stores it
      const Tensor biased = empty({rows, 1, n}, o), summed = empty({rows, 1, n}, o);
      ASSERT_TRUE(gemm_bias::run(a, b, bias, biased)) << what;
      ASSERT_TRUE(gemm_bias::run(a, b, bias, summed, x)) << what;
      // The 16-bit values as float32 (every one of them exactly).
      auto values = [](const Tensor& v) { return v.cpu().to(DType::Float32).to_vector<float>(); };
      EXPECT_EQ(values(biased), values(product + bias)) << what;
      const Tensor f32 = product.cpu().to(DType::Float32);
      const Tensor once =
          ((f32 + bias.cpu().to(DType::Float32)) + x.cpu().to(DType::Float32)).to(t);
      EXPECT_EQ(values(summed), values(once)) << what;
      // The gelu of the biased product (an MLP's first layer): the exact gelu of the stored
      // product plus the bias, within a rounding to the dtype.
      const Tensor activated = empty({rows, 1, n}, o);
      ASSERT_TRUE(gemm_bias::run(a, b, bias, activated, Tensor(), /*gelu=*/true)) << what;
      const Tensor exact = gelu(product.cpu().to(DType::Float64) + bias.cpu().to(DType::Float64));
      const double ulp = t == DType::BFloat16 ? 0x1p-8 : 0x1p-11;
      EXPECT_LE(((activated.cpu().to(DType::Float64) - exact).abs() - (exact.abs() * ulp + 1e-6))
                    .amax()
                    .item(),
                0.0)
          << what;
      // Not with a residual, nor over more rows (cuBLASLt's gelu is the tanh form).
      EXPECT_FALSE(gemm_bias::run(a, b, bias, activated, x, true)) << what;
      const Tensor many = randn({8, 1, k}).to(t).to(kGpu);
      EXPECT_FALSE(gemm_bias::run(many, b, bias, empty({8, 1, n}, o), Tensor(), true)) << what;
    }
}

// With the layer_norm before it (gemm_bias::LayerNormIn: a decode step's ln_1 or ln_2 and the
// projection after it), the gemv normalizes the rows in its blocks as the layer_norm op's kernel
// does: the result equals the ops' (layer_norm, then matmul, then the bias add) bit for bit, for
// rows of 768 (64 threads a row in the op's kernel), 1000 and 4096 (256 threads), with and
// without the gelu after, and without a bias (ln_f and a GPT-2's logits: the columns-in-turn
// kernel); and it declines what only other kernels take.
TEST(CudaOps, LayerNormThenFewRowGemmIsTheOpsBitForBit) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  NoGradGuard no_grad;
  for (DType t : {DType::BFloat16, DType::Float16})
    for (auto [rows, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 768, 2304}, {3, 1000, 96},
                              {2, 4096, 64}, {1, 768, 50304}}) {
      manual_seed(uint64_t(rows + k + n + 3));
      const Tensor x = (randn({rows, 1, k}) * 3.0 + 1.0).to(t).to(kGpu);
      const Tensor lw = (randn({k}) * 0.5 + 1.0).to(t).to(kGpu);
      const Tensor lb = (randn({k}) * 0.5).to(t).to(kGpu);
      const Tensor b = randn({n, k}).to(t).to(kGpu).t();
      const Tensor bias = randn({n}).to(t).to(kGpu);
      TensorOptions o(t);
      o.device = kGpu;
      const std::string what = std::string(dtype_name(t)) + " " + std::to_string(rows) + "x" +
                               std::to_string(k) + "x" + std::to_string(n);
      const Tensor normed = layer_norm(x, {k}, lw, lb, 1e-5);
      const Tensor want = matmul(normed, b) + bias;
      const gemm_bias::LayerNormIn ln{lw, lb, 1e-5};
      const Tensor got = empty({rows, 1, n}, o);
      ASSERT_TRUE(gemm_bias::run(x, b, bias, got, Tensor(), false, &ln)) << what;
      auto values = [](const Tensor& v) { return v.cpu().to(DType::Float32).to_vector<float>(); };
      EXPECT_EQ(values(got), values(want)) << what;
      const Tensor activated = empty({rows, 1, n}, o);
      const Tensor plain = empty({rows, 1, n}, o);
      ASSERT_TRUE(gemm_bias::run(x, b, bias, activated, Tensor(), true, &ln)) << what;
      ASSERT_TRUE(gemm_bias::run(normed, b, bias, plain, Tensor(), true)) << what;
      EXPECT_EQ(values(activated), values(plain)) << what;
      // No bias: the product of the normalized rows, as the matmul op stores it; without the
      // layer_norm, declined (the op itself runs).
      const Tensor product = empty({rows, 1, n}, o);
      ASSERT_TRUE(gemm_bias::run(x, b, Tensor(), product, Tensor(), false, &ln)) << what;
      EXPECT_EQ(values(product), values(matmul(normed, b))) << what << " without a bias";
      EXPECT_FALSE(gemm_bias::run(normed, b, Tensor(), product, Tensor(), false)) << what;
      // Not over more rows than the gemv takes, nor against a weight read as it lies.
      const Tensor many = randn({8, 1, k}).to(t).to(kGpu);
      EXPECT_FALSE(gemm_bias::run(many, b, bias, empty({8, 1, n}, o), Tensor(), false, &ln))
          << what;
      EXPECT_FALSE(gemm_bias::run(x, b.contiguous(), bias, got, Tensor(), false, &ln)) << what;
    }
}

}  // namespace
}  // namespace ember::test
