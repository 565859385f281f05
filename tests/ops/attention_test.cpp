// The fused attention op beyond the op cases: its dropout mask is the composite's (same
// generator state, same kept positions, same draws consumed), its grad with dropout matches
// finite differences and the composite's grad, autocast lowers its inputs as matmul does, and
// errors name the op.
#include "ops/attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "dispatch/dispatcher.h"
#include "ember/autograd.h"
#include "kernels/attention_layout.h"
#include "ember/ember.h"
#include "support/expect_error.h"
#include "support/op_cases.h"

namespace ember {
namespace {

using test::expect_error;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  NoGradGuard no_grad;
  if (a.numel() == 0) return 0;
  return (a.to(DType::Float64) - b.to(DType::Float64)).abs().amax().item();
}

Tensor identity(int64_t n) {
  std::vector<double> v(size_t(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) v[size_t(i * n + i)] = 1;
  return from_vector(v, {n, n}, DType::Float64);
}

// With v the identity (F = S), out is the dropped, rescaled probability matrix itself: the
// fused op and the composite must zero the same elements and agree on the others, from the
// same generator state, and leave the generator at the same place.
TEST(FusedAttention, DropoutKeepsTheCompositesElements) {
  for (bool causal : {false, true}) {
    const int64_t L = 9, S = 13;
    const Tensor q = test::random_tensor({2, 3, L, 8}, DType::Float64);
    const Tensor k = test::random_tensor({2, 3, S, 8}, DType::Float64);
    const Tensor v = identity(S).expand({2, 3, S, S});
    manual_seed(99);
    const Tensor composite = scaled_dot_product_attention(q, k, v, causal, 0.4);
    const RngState after_composite = get_rng_state();
    manual_seed(99);
    const Tensor fused = fused_attention(q, k, v, causal, 0.4, std::nullopt).out;
    const RngState after_fused = get_rng_state();
    EXPECT_EQ(after_fused.seed, after_composite.seed);
    EXPECT_EQ(after_fused.offset, after_composite.offset);
    const std::vector<double> c = composite.to_vector<double>(), f = fused.to_vector<double>();
    ASSERT_EQ(c.size(), f.size());
    int64_t dropped = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      EXPECT_EQ(c[i] == 0, f[i] == 0) << "element " << i << (causal ? " (causal)" : "");
      EXPECT_NEAR(f[i], c[i], 1e-12) << "element " << i;
      dropped += c[i] == 0;
    }
    EXPECT_GT(dropped, int64_t(c.size()) / 5);  // about 40% of the visible ones
  }
}

TEST(FusedAttention, DropoutMatchesTheCompositeInEveryDtype) {
  for (DType t : {DType::Float32, DType::BFloat16}) {
    const Tensor q = test::random_tensor({2, 5, 4}, t), k = test::random_tensor({2, 7, 4}, t),
                 v = test::random_tensor({2, 7, 3}, t);
    manual_seed(5);
    const Tensor composite = scaled_dot_product_attention(q, k, v, true, 0.2);
    manual_seed(5);
    const Tensor fused = fused_attention(q, k, v, true, 0.2, std::nullopt).out;
    EXPECT_EQ(fused.dtype(), t);
    EXPECT_LT(max_abs_diff(fused, composite), t == DType::Float32 ? 1e-5 : 0.1);
  }
}

TEST(FusedAttention, DropoutGradMatchesFiniteDifferences) {
  for (bool causal : {false, true}) {
    auto f = [causal](const test::Inputs& in) {
      manual_seed(1234);  // the same mask at every evaluation
      return test::Inputs{fused_attention(in[0], in[1], in[2], causal, 0.3, std::nullopt).out};
    };
    const test::Inputs in = {test::random_tensor({2, 4, 3}, DType::Float64),
                             test::random_tensor({2, 5, 3}, DType::Float64),
                             test::random_tensor({2, 5, 2}, DType::Float64)};
    EXPECT_EQ(test::gradcheck(f, in, {0, 1, 2}), "") << (causal ? "causal" : "");
  }
}

TEST(FusedAttention, GradMatchesTheCompositeGrad) {
  for (double p : {0.0, 0.25}) {
    const Tensor q0 = test::random_tensor({2, 3, 6, 5}, DType::Float64);
    const Tensor k0 = test::random_tensor({2, 3, 8, 5}, DType::Float64);
    const Tensor v0 = test::random_tensor({2, 3, 8, 4}, DType::Float64);
    const Tensor w = test::random_tensor({2, 3, 6, 4}, DType::Float64);
    auto grads = [&](bool fused) {
      Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
             v = v0.clone().requires_grad_(true);
      manual_seed(77);
      Tensor out = fused ? fused_attention(q, k, v, true, p, 0.3).out
                         : scaled_dot_product_attention(q, k, v, true, p, 0.3);
      (out * w).sum().backward();
      return std::vector<Tensor>{q.grad(), k.grad(), v.grad()};
    };
    const std::vector<Tensor> want = grads(false), got = grads(true);
    for (size_t i = 0; i < 3; ++i) EXPECT_LT(max_abs_diff(got[i], want[i]), 1e-12) << i;
  }
}

// The heads-inner layout (attrs.dim = 1, what fused_attention asks for on a GPU): the output,
// and the backward's o and dout, hold [B, L, H, F]; values and grads equal the usual layout's.
TEST(FusedAttention, HeadsInnerLayoutGivesTheSameValuesAndGrads) {
  NoGradGuard no_grad;
  const Tensor q = test::random_tensor({2, 3, 6, 5}, DType::Float64);
  const Tensor k = test::random_tensor({2, 3, 8, 5}, DType::Float64);
  const Tensor v = test::random_tensor({2, 3, 8, 4}, DType::Float64);
  const Tensor g = test::random_tensor({2, 3, 6, 4}, DType::Float64);
  Attrs a;
  a.flag = true;
  a.value2 = 0.3;
  const std::vector<Tensor> want = dispatch(OpId::attention, {q, k, v}, a);
  Attrs inner = a;
  inner.dim = 1;
  const std::vector<Tensor> got = dispatch(OpId::attention, {q, k, v}, inner);
  ASSERT_EQ(got[0].sizes(), (Shape{2, 6, 3, 4}));
  EXPECT_TRUE(got[0].is_contiguous());
  EXPECT_LT(max_abs_diff(got[0].transpose(1, 2), want[0]), 1e-14);
  EXPECT_LT(max_abs_diff(got[1], want[1]), 1e-14);
  const std::vector<Tensor> dwant =
      dispatch(OpId::attention_backward, {q, k, v, want[0], want[1], g}, a);
  const std::vector<Tensor> dgot = dispatch(
      OpId::attention_backward, {q, k, v, got[0], got[1], g.transpose(1, 2).contiguous()}, inner);
  for (size_t i = 0; i < 3; ++i) {
    // The grads in the heads-inner layout too: [B, L, H, E].
    ASSERT_EQ(dgot[i].transpose(1, 2).sizes(), dwant[i].sizes()) << i;
    EXPECT_TRUE(dgot[i].is_contiguous()) << i;
    EXPECT_LT(max_abs_diff(dgot[i].transpose(1, 2), dwant[i]), 1e-13) << i;
  }
  // Through autograd: the grads of q, k and v equal the usual layout's.
  auto grads = [&](const Attrs& at) {
    EnableGradGuard grad;
    Tensor qq = q.clone().requires_grad_(true), kk = k.clone().requires_grad_(true),
           vv = v.clone().requires_grad_(true);
    Tensor out = dispatch(OpId::attention, {qq, kk, vv}, at)[0];
    if (attention_layout::heads_inner(at)) out = out.transpose(1, 2);
    (out * g).sum().backward();
    return std::vector<Tensor>{qq.grad(), kk.grad(), vv.grad()};
  };
  const std::vector<Tensor> gw = grads(a), gg = grads(inner);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(gg[i].sizes(), gw[i].sizes()) << i;
    EXPECT_LT(max_abs_diff(gg[i], gw[i]), 1e-13) << i;
  }
  expect_error(
      [&] {
        dispatch(OpId::attention, {q.select(0, 0), k.select(0, 0), v.select(0, 0)}, inner);
      },
      {"heads-inner layout", "[B, H, L, E]"});
}

TEST(FusedAttention, BroadcastsBatchDimsAndPromotes) {
  const Tensor q = test::random_tensor({2, 3, 4, 5}, DType::Float64);
  const Tensor k = test::random_tensor({3, 6, 5}, DType::Float32);  // broadcast over dim 0
  const Tensor v = test::random_tensor({1, 3, 6, 2}, DType::Float64);
  const Tensor fused = fused_attention(q, k, v, false, 0.0, std::nullopt).out;
  const Tensor composite = scaled_dot_product_attention(q, k, v);
  EXPECT_EQ(fused.sizes(), (Shape{2, 3, 4, 2}));
  EXPECT_EQ(fused.dtype(), DType::Float64);
  EXPECT_LT(max_abs_diff(fused, composite), 1e-12);
}

TEST(FusedAttention, AutocastRunsInTheLowerDtype) {
  const Tensor q = test::random_tensor({2, 4, 8}, DType::Float32);
  const Tensor k = test::random_tensor({2, 4, 8}, DType::Float32);
  const Tensor v = test::random_tensor({2, 4, 8}, DType::Float32);
  autocast scope(DType::BFloat16);
  AttentionResult r = fused_attention(q, k, v, true, 0.0, std::nullopt);
  EXPECT_EQ(r.out.dtype(), DType::BFloat16);
  EXPECT_EQ(r.lse.dtype(), DType::Float32);
}

TEST(FusedAttention, ErrorsNameTheOp) {
  const Tensor x = ones({2, 3, 4});
  expect_error(
      [&] {
        fused_attention(x, ones({2, 3, 5}), x, false, 0.0, std::nullopt);
      },
      {"scaled_dot_product_attention", "[2, 3, 4]", "[2, 3, 5]", "last dim"});
  expect_error(
      [&] {
        fused_attention(x, x, ones({2, 5, 4}), false, 0.0, std::nullopt);
      },
      {"scaled_dot_product_attention", "sequence length"});
  expect_error([&] { fused_attention(x, x, x, false, 1.0, std::nullopt); },
               {"scaled_dot_product_attention", "dropout_p", "[0, 1)"});
  expect_error(
      [&] {
        const Tensor i = ones({2, 3, 4}, DType::Int64);
        fused_attention(i, i, i, false, 0.0, std::nullopt);
      },
      {"scaled_dot_product_attention", "floating point", "int64"});
  expect_error(
      [&] {
        fused_attention(x, ones({3, 3, 4}), x, false, 0.0, std::nullopt);
      },
      {"scaled_dot_product_attention", "broadcast"});
  // attention_backward has no grad of its own.
  expect_error(
      [&] {
        const Tensor q = ones({1, 2, 2}).requires_grad_(true);
        AttentionResult r = fused_attention(q, q, q, false, 0.0, std::nullopt);
        Attrs a;
        a.value2 = 1;
        dispatch(OpId::attention_backward, {q, q, q, r.out, r.lse, r.out}, a);
      },
      {"attention_backward", "no gradient"});
}

}  // namespace
}  // namespace ember
