// The attention backward kernel (FusionGroup::attn_bwd): the grads of q, k and v through
// softmax(q k^T * scale + mask) @ v from a compiled training step against eager autograd, with
// the heads packed into one qkv tensor as in a GPT (the kernel then writes the merged qkv
// grad) and as separate tensors, causal, user-masked and unmasked.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler/compiler_test_util.h"
#include "compiler/toolchain.h"
#include "ember/autograd.h"
#include "ember/ember.h"

namespace ember {
namespace {

using test::CacheDir;
using test::has;
using test::spy_opts;

// Float32 grads summed in another order than OpenBLAS's: within rtol 1e-4, atol 1e-5.
::testing::AssertionResult close(const Tensor& a, const Tensor& b) {
  return test::close(a, b, 1e-4, 1e-5);
}

// y = attention over the heads of a packed [B, T, 3 * H * D] qkv, heads merged back, weighted
// by r: the loss a GPT layer's attention contributes.
Tensor packed_attention_loss(const Tensor& qkv, const Tensor& r, int64_t heads, bool causal,
                             double dropout = 0) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / heads;
  std::vector<Tensor> p = qkv.split(C, 2);
  auto split = [&](const Tensor& t) { return t.view({B, T, heads, D}).transpose(1, 2); };
  Tensor y = scaled_dot_product_attention(split(p[0]), split(p[1]), split(p[2]), causal, dropout);
  return (y.transpose(1, 2).contiguous().view({B, T, C}) * r).sum();
}

class AttentionBackwardTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(compiler::compiler_available()); }
  CacheDir dir{test::kSharedCompilerCache};
};

TEST_F(AttentionBackwardTest, PackedCausalHeadsGiveEagersQkvGrad) {
  // Sequence lengths and head sizes that leave partial register tiles (32 rows against tiles
  // of 6, 12 and 24; 48 against 6 and 3), on a fresh compile each.
  struct Case {
    int64_t B, T, H, D;
  };
  for (const Case c : {Case{2, 32, 2, 16}, Case{1, 48, 3, 64}}) {
    for (bool causal : {true, false}) {
      auto loss = [&](const Tensor& qkv, const Tensor& r) {
        return packed_attention_loss(qkv, r, c.H, causal);
      };
      auto f = compile(loss, spy_opts());
      for (int call = 0; call < 2; ++call) {  // fresh data on a warm compile as well
        Tensor qkv = randn({c.B, c.T, 3 * c.H * c.D}), r = randn({c.B, c.T, c.H * c.D});
        Tensor xe = qkv.detach().clone().requires_grad_(true);
        Tensor xc = qkv.detach().clone().requires_grad_(true);
        loss(xe, r).backward();
        f(xc, r).backward();
        EXPECT_TRUE(close(xc.grad(), xe.grad()))
            << "T " << c.T << " D " << c.D << (causal ? " causal" : "") << " call " << call;
      }
      const std::string& src = test::all_sources();
      EXPECT_TRUE(has(src, "attention backward over " + std::to_string(c.B * c.H) +
                               " matrices of " + std::to_string(c.T)))
          << src;
      EXPECT_TRUE(has(src, "constexpr bool kDkRows = true;"));  // the merged qkv grad
    }
  }
}

TEST_F(AttentionBackwardTest, AttentionDropoutUsesTheSameMaskAsEager) {
  // Dropout on the probabilities: the backward's dv reads p * m and the softmax grad dp * m,
  // m the forward's scaled mask; from the same seed compiled and eager draw the same masks.
  auto loss = [](const Tensor& qkv, const Tensor& r) {
    return packed_attention_loss(qkv, r, 2, true, 0.25);
  };
  auto f = compile(loss, spy_opts());
  for (int call = 0; call < 2; ++call) {
    Tensor qkv = randn({2, 32, 3 * 2 * 16}), r = randn({2, 32, 2 * 16});
    Tensor xe = qkv.detach().clone().requires_grad_(true);
    Tensor xc = qkv.detach().clone().requires_grad_(true);
    manual_seed(11 + call);
    loss(xe, r).backward();
    manual_seed(11 + call);
    f(xc, r).backward();
    EXPECT_TRUE(close(xc.grad(), xe.grad())) << "call " << call;
  }
  EXPECT_TRUE(has(test::all_sources(), "constexpr bool kMask = true;")) << test::all_sources();
}

TEST_F(AttentionBackwardTest, SeparateHeadsAndMasksWithZerosInsideRows) {
  // q, k, v as leaves of their own: three results, k's grad written transposed. The mask puts
  // exact zeros inside rows (computed, not skipped) and at the ends of some (skipped).
  const int64_t B = 2, H = 2, T = 32, D = 16;
  std::vector<float> m(size_t(T * T), 0.f);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j)
      if (((i + 2 * j) % 5 == 0 && j != i) || (i % 3 == 0 && j > i))
        m[size_t(i * T + j)] = -INFINITY;
  const Tensor mask = from_vector(m, {T, T});
  auto loss = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& r) {
    Tensor p = (q.matmul(k.transpose(-2, -1)) * (1 / std::sqrt(double(D))) + mask).softmax(-1);
    return (p.matmul(v) * r).sum();
  };
  auto f = compile(loss, spy_opts());
  Tensor q = randn({B, H, T, D}), k = randn({B, H, T, D}), v = randn({B, H, T, D});
  Tensor r = randn({B, H, T, D});
  std::vector<Tensor> e, c;
  for (const Tensor& t : {q, k, v}) {
    e.push_back(t.detach().clone().requires_grad_(true));
    c.push_back(t.detach().clone().requires_grad_(true));
  }
  loss(e[0], e[1], e[2], r).backward();
  f(c[0], c[1], c[2], r).backward();
  const char* names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(close(c[i].grad(), e[i].grad())) << names[i];
  std::string src = test::all_sources();
  EXPECT_TRUE(has(src, "attention backward over 4 matrices of 32")) << src;
  EXPECT_TRUE(has(src, "constexpr bool kDkRows = true;"));  // dk = ds^T @ q, rows
  // Keys given transposed ([.., D, T]): their grad is q^T @ ds, written transposed.
  auto loss_t = [&](const Tensor& q, const Tensor& kt, const Tensor& v, const Tensor& r) {
    Tensor p = (q.matmul(kt) * 0.25 + mask).softmax(-1);
    return (p.matmul(v) * r).sum();
  };
  auto ft = compile(loss_t, spy_opts());
  const Tensor kt = k.transpose(-2, -1).contiguous();
  e.clear();
  c.clear();
  for (const Tensor& t : {q, kt, v}) {
    e.push_back(t.detach().clone().requires_grad_(true));
    c.push_back(t.detach().clone().requires_grad_(true));
  }
  loss_t(e[0], e[1], e[2], r).backward();
  ft(c[0], c[1], c[2], r).backward();
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(close(c[i].grad(), e[i].grad())) << names[i] << " (k^T given)";
  src = test::all_sources();
  EXPECT_TRUE(has(src, "attention backward over 4 matrices of 32")) << src;
  EXPECT_TRUE(has(src, "constexpr bool kDkRows = false;"));
}

TEST_F(AttentionBackwardTest, Float64AndOddHeadSizesStayWithTheGeneralPath) {
  // The kernel takes float32 with sequence length and head size multiples of 16; other
  // attention backwards run as before and still match eager.
  for (auto [t, D] :
       {std::pair{DType::Float64, int64_t(16)}, std::pair{DType::Float32, int64_t(8)}}) {
    auto loss = [](const Tensor& qkv, const Tensor& r) {
      return packed_attention_loss(qkv, r, 2, true);
    };
    auto f = compile(loss, spy_opts());
    TensorOptions o(t);
    Tensor qkv = randn({2, 16, 3 * 2 * D}, o), r = randn({2, 16, 2 * D}, o);
    Tensor xe = qkv.detach().clone().requires_grad_(true);
    Tensor xc = qkv.detach().clone().requires_grad_(true);
    loss(xe, r).backward();
    f(xc, r).backward();
    EXPECT_TRUE(close(xc.grad(), xe.grad())) << dtype_name(t);
    EXPECT_FALSE(has(test::all_sources(), "attention backward over")) << dtype_name(t);
  }
}

}  // namespace
}  // namespace ember
