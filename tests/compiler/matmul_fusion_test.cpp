// The compiler's matmul fusions against eager: gemm groups (a bias or residual added to a
// matmul product runs as the gemm's epilogue) and attention groups (scores, softmax and the
// product with v in one kernel, causal masks skipping the masked keys).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "capture/capture.h"
#include "capture/capture_test_util.h"
#include "compiler/compiled_graph.h"
#include "compiler/compiler_test_util.h"
#include "compiler/toolchain.h"
#include "ember/autograd.h"
#include "ember/ember.h"
#include "ember/nn.h"

namespace ember {
namespace {

using test::CacheDir;
using test::compiler_opts;
using test::count;
using test::has;
using test::spy_opts;

// The fused kernels sum in another order than OpenBLAS and the eager softmax: float32 results
// agree to rtol 1e-4 (atol 1e-5 near zero), float64 to rtol 1e-11. NaN must match NaN.
::testing::AssertionResult allclose(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << "metadata differs: " << a.shape_str() << " vs "
                                         << b.shape_str();
  const bool f64 = a.dtype() == DType::Float64;
  return test::close(a, b, f64 ? 1e-11 : 1e-4, f64 ? 1e-13 : 1e-5);
}

class MatmulFusionTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(compiler::compiler_available()); }
  CacheDir dir{test::kSharedCompilerCache};
  NoGradGuard no_grad;
};

TEST_F(MatmulFusionTest, LinearBiasActivationAndResidualMatchEager) {
  // The GPT MLP shape: gelu(x W1^T + b1) W2^T + b2 + x, batched [B, T, C].
  auto mlp = [](const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                const Tensor& b2) { return x + linear(linear(x, w1, b1).gelu(), w2, b2); };
  auto f = compile(mlp, spy_opts());
  // 15 rows, and 64 rows: more rows than 4 times the columns of either product.
  for (int64_t t_len : {5, 16})
    for (DType t : {DType::Float32, DType::Float64}) {
      TensorOptions o(t);
      Tensor x = randn({3 + t_len / 16, t_len, 8}, o), w1 = randn({12, 8}, o),
             b1 = randn({12}, o), w2 = randn({8, 12}, o), b2 = randn({8}, o);
      EXPECT_TRUE(allclose(f(x, w1, b1, w2, b2), mlp(x, w1, b1, w2, b2))) << dtype_name(t);
      // Both products run their bias (the second also the residual x) as the gemm's epilogue.
      const std::string& src = test::last_source();
      EXPECT_EQ(count(src, "the epilogue of "), 2) << src;
    }
}

TEST_F(MatmulFusionTest, SubtractionsKeepTheirSign) {
  // a @ b - c accumulates onto -c; c - a @ b cannot (the product is negated) and stays apart.
  auto left = [](const Tensor& a, const Tensor& b, const Tensor& c) { return a.matmul(b) - c; };
  auto right = [](const Tensor& a, const Tensor& b, const Tensor& c) { return c - a.matmul(b); };
  auto both = [](const Tensor& a, const Tensor& b, const Tensor& c) {
    return (a.matmul(b) + c) * 2.0 + a.matmul(b);  // a second product after a non-add
  };
  Tensor a = randn({6, 4}), b = randn({4, 5}), c = randn({6, 5}), row = randn({5});
  EXPECT_TRUE(allclose(compile(left, compiler_opts())(a, b, c), left(a, b, c)));
  EXPECT_TRUE(allclose(compile(right, compiler_opts())(a, b, c), right(a, b, c)));
  EXPECT_TRUE(allclose(compile(both, compiler_opts())(a, b, row), both(a, b, row)));
  // A batched product with a transposed operand (a trans flag for BLAS, no copy).
  Tensor ab = randn({2, 6, 4}), bt = randn({5, 4});
  auto lin = [](const Tensor& x, const Tensor& w, const Tensor& r) { return x.matmul(w.t()) + r; };
  EXPECT_TRUE(allclose(compile(lin, compiler_opts())(ab, bt, row), lin(ab, bt, row)));
}

// q, k, v as the GPT makes them: views of one [B, T, 3C] projection, split into heads.
struct Heads {
  Tensor q, k, v;
};
Heads gpt_heads(int64_t B, int64_t T, int64_t nh, int64_t hs, DType t) {
  Tensor qkv = randn({B, T, 3 * nh * hs}, TensorOptions(t));
  std::vector<Tensor> parts = qkv.split(nh * hs, 2);
  auto heads = [&](const Tensor& x) { return x.view({B, T, nh, hs}).transpose(1, 2); };
  return {heads(parts[0]), heads(parts[1]), heads(parts[2])};
}

TEST_F(MatmulFusionTest, CausalAttentionMatchesEager) {
  auto attn = [](const Tensor& q, const Tensor& k, const Tensor& v) {
    return scaled_dot_product_attention(q, k, v, /*is_causal=*/true);
  };
  // Each configuration compiled on its own (dynamic = false): the first graph of a form at
  // varying sizes would otherwise run interpreted and write no source to look at.
  CompileOptions o = spy_opts();
  o.dynamic = false;
  auto f = compile(attn, o);
  // Head sizes on and off the vector width, sequence lengths not a multiple of it.
  for (int64_t hs : {16, 7}) {
    for (DType t : {DType::Float32, DType::Float64}) {
      Heads h = gpt_heads(2, 19, 3, hs, t);
      EXPECT_TRUE(allclose(f(h.q, h.k, h.v), attn(h.q, h.k, h.v)))
          << "hs " << hs << " " << dtype_name(t);
      EXPECT_TRUE(has(test::last_source(), "attention over 6 batch matrices"));
      EXPECT_TRUE(has(test::last_source(), ", causal"));
    }
  }
  // The heads merged back as the GPT does: the kernel writes the merged layout itself.
  auto merged = [](const Tensor& q, const Tensor& k, const Tensor& v) {
    const int64_t B = q.size(0), nh = q.size(1), T = q.size(2), hs = q.size(3);
    return scaled_dot_product_attention(q, k, v, true).transpose(1, 2).contiguous().view(
        {B, T, nh * hs});
  };
  for (int64_t hs : {16, 7}) {
    Heads h = gpt_heads(2, 19, 3, hs, DType::Float32);
    EXPECT_TRUE(allclose(compile(merged, spy_opts())(h.q, h.k, h.v), merged(h.q, h.k, h.v)))
        << "hs " << hs;
    EXPECT_TRUE(has(test::last_source(), "(written in place)"));
  }
  // Contiguous inputs, more queries than keys (top-left aligned mask).
  Tensor q = randn({2, 9, 8}), k = randn({2, 5, 8}), v = randn({2, 5, 32});
  EXPECT_TRUE(allclose(f(q, k, v), attn(q, k, v)));
}

TEST_F(MatmulFusionTest, AttentionAlsoWritesItsProbabilitiesWhenTheyAreAnOutput) {
  // A training forward saves the softmax output for the backward: the attention kernel then
  // writes it as well (zeros where the causal mask skipped keys).
  auto fn = [](const Tensor& q, const Tensor& k, const Tensor& v) {
    const int64_t T = q.size(-2);
    Tensor mask = full({T, T}, -INFINITY).triu(1);
    Tensor p = (q.matmul(k.transpose(-2, -1)) * 0.25 + mask).softmax(-1);
    return std::make_pair(p.matmul(v), p);
  };
  auto f = compile(fn, spy_opts());
  for (DType t : {DType::Float32, DType::Float64}) {
    Heads h = gpt_heads(2, 37, 3, 16, t);
    auto [y, p] = f(h.q, h.k, h.v);
    auto [ey, ep] = fn(h.q, h.k, h.v);
    EXPECT_TRUE(allclose(y, ey)) << dtype_name(t);
    EXPECT_TRUE(allclose(p, ep)) << dtype_name(t);
    EXPECT_TRUE(has(test::last_source(), "attention over 6 batch matrices"));
    EXPECT_TRUE(has(test::last_source(), "the probabilities, is written out too"));
  }
}

TEST_F(MatmulFusionTest, UnmaskedAndUserMaskedAttentionMatchEager) {
  auto plain = [](const Tensor& q, const Tensor& k, const Tensor& v) {
    return scaled_dot_product_attention(q, k, v, /*is_causal=*/false);
  };
  auto masked = [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& m) {
    return (q.matmul(k.transpose(-2, -1)) * 0.5 + m).softmax(-1).matmul(v);
  };
  Heads h = gpt_heads(2, 21, 2, 16, DType::Float32);
  EXPECT_TRUE(allclose(compile(plain, spy_opts())(h.q, h.k, h.v), plain(h.q, h.k, h.v)));
  EXPECT_TRUE(has(test::last_source(), "attention over"));
  EXPECT_TRUE(has(test::last_source(), "k transposed in blocks of 16 keys"));
  EXPECT_FALSE(has(test::last_source(), ", causal"));
  Tensor m = randn({21, 21});
  EXPECT_TRUE(allclose(compile(masked, spy_opts())(h.q, h.k, h.v, m), masked(h.q, h.k, h.v, m)));
  EXPECT_TRUE(has(test::last_source(), "attention over"));
  EXPECT_FALSE(has(test::last_source(), ", causal"));
  // Keys given already transposed and contiguous ([.., E, S]): packed row by row.
  auto pre_transposed = [](const Tensor& q, const Tensor& kt, const Tensor& v) {
    return (q.matmul(kt) * 0.5).softmax(-1).matmul(v);
  };
  Tensor kt = h.k.transpose(-2, -1).contiguous();
  EXPECT_TRUE(allclose(compile(pre_transposed, spy_opts())(h.q, kt, h.v),
                       pre_transposed(h.q, kt, h.v)));
  EXPECT_TRUE(has(test::last_source(), "attention over"));
  EXPECT_FALSE(has(test::last_source(), "k transposed in blocks of 16 keys"));
}

TEST_F(MatmulFusionTest, MaskDiagonalsIncludingFullyMaskedRows) {
  // triu(-inf, d) masks keys j >= i + d; with d <= 0 the first rows have no key left and the
  // softmax gives NaN, as eager does.
  for (int64_t d : {1, 3, 0, -2}) {
    auto fn = [d](const Tensor& q, const Tensor& k, const Tensor& v) {
      const int64_t L = q.size(-2), S = k.size(-2);
      Tensor mask = full({L, S}, -INFINITY).triu(d);
      return (q.matmul(k.transpose(-2, -1)) + mask).softmax(-1).matmul(v);
    };
    Tensor q = randn({3, 6, 16}), k = randn({3, 6, 16}), v = randn({3, 6, 16});
    EXPECT_TRUE(allclose(compile(fn, compiler_opts())(q, k, v), fn(q, k, v))) << "diag " << d;
  }
}

TEST(SliceBackwardFusion, SplitGradsBecomeOneKernel) {
  // The backward of a split along the last dim sums one slice_backward per part: fused into
  // one kernel that selects each column's grad (no zero-filled buffers). Steps of 1 and 2.
  ASSERT_TRUE(compiler::compiler_available());
  CacheDir dir{test::kSharedCompilerCache};
  for (int64_t step : {1, 2}) {
    auto fn = [step](const Tensor& x) {
      std::vector<Tensor> p = x.split(4, -1);
      Tensor odd = x.slice(-1, 1, 12, step);  // a strided slice too
      return (p[0] * p[1] + p[2].tanh()).sum() + odd.exp().sum();
    };
    auto f = compile(fn, spy_opts());
    for (int call = 0; call < 2; ++call) {
      Tensor x = randn({3, 5, 12});
      Tensor xe = x.detach().clone(), xc = x.detach().clone();
      xe.requires_grad_(true);
      xc.requires_grad_(true);
      fn(xe).backward();
      f(xc).backward();
      EXPECT_TRUE(allclose(xc.grad(), xe.grad())) << "step " << step << " call " << call;
    }
    EXPECT_TRUE(has(test::all_sources(), "slice_backward(")) << test::all_sources();
    EXPECT_TRUE(has(test::all_sources(), "_in = j >= ")) << test::all_sources();
  }
}

TEST_F(MatmulFusionTest, GptForwardMatchesEager) {
  manual_seed(3);
  auto model = std::make_shared<nn::GPT>(test::tiny_gpt());
  model->eval();
  auto cm = compile(model, spy_opts());
  Tensor idx = randint(0, 11, {3, 8});
  EXPECT_TRUE(allclose(cm(idx), model->forward(idx)));
  const std::string& src = test::last_source();
  EXPECT_EQ(count(src, "(written in place)"), 2);  // one attention kernel per layer
  EXPECT_EQ(count(src, "the epilogue of "), 8);    // c_attn, attn c_proj, c_fc, mlp c_proj
}

}  // namespace
}  // namespace ember
