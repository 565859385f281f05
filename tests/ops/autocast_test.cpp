// autocast scopes: which ops run in the scope's dtype and which in float32, grads of float32
// parameters in float32, nesting, and compiled functions guarding on the scope.
#include <gtest/gtest.h>

#include "ember/compile.h"
#include "ember/ember.h"
#include "support/expect_error.h"

namespace ember::test {
namespace {

TEST(Autocast, ProductsRunInTheScopeDtypeAndNormsInFloat32) {
  Tensor x = randn({4, 8}), w = randn({6, 8}), b = randn({6});
  {
    autocast scope(DType::BFloat16);
    EXPECT_EQ(autocast_dtype(), DType::BFloat16);
    Tensor y = linear(x, w, b);
    EXPECT_EQ(y.dtype(), DType::BFloat16);
    EXPECT_EQ(matmul(x, w.t()).dtype(), DType::BFloat16);
    EXPECT_EQ(y.softmax(-1).dtype(), DType::Float32);
    EXPECT_EQ(y.log_softmax(-1).dtype(), DType::Float32);
    EXPECT_EQ(layer_norm(y, {6}).dtype(), DType::Float32);
    Tensor t = from_vector<int64_t>({0, 1, 2, 3}, {4}, DType::Int64);
    EXPECT_EQ(cross_entropy(y, t).dtype(), DType::Float32);
    // Elementwise ops take the widest input: bf16 + f32 is f32.
    EXPECT_EQ((y + b).dtype(), DType::Float32);
    // The values are the float32 ones up to bfloat16 rounding.
    Tensor want = linear(x, w, b);
    {
      autocast off(DType::BFloat16, false);
      EXPECT_FALSE(autocast_dtype().has_value());
      want = linear(x, w, b);
    }
    EXPECT_EQ(want.dtype(), DType::Float32);
    const double err = (y.to(DType::Float32) - want).abs().amax().item();
    EXPECT_LT(err, 0.05 * (want.abs().amax().item() + 1));
  }
  EXPECT_FALSE(autocast_dtype().has_value());
  EXPECT_EQ(linear(x, w, b).dtype(), DType::Float32);
  expect_error([] { autocast s(DType::Int32); }, {"autocast", "bfloat16 or float16"});
}

TEST(Autocast, GradsOfFloat32ParametersAreFloat32) {
  Tensor x = randn({4, 8});
  Tensor w = randn({6, 8}).requires_grad_(true);
  Tensor b = zeros({6}).requires_grad_(true);
  Tensor loss;
  {
    autocast scope(DType::BFloat16);
    loss = cross_entropy(linear(x, w, b), from_vector<int64_t>({0, 1, 2, 3}, {4}, DType::Int64));
  }
  loss.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::Float32);
  EXPECT_EQ(b.grad().dtype(), DType::Float32);
  // Close to the float32 grads.
  Tensor w2 = w.detach().requires_grad_(true), b2 = b.detach().requires_grad_(true);
  cross_entropy(linear(x, w2, b2), from_vector<int64_t>({0, 1, 2, 3}, {4}, DType::Int64)).backward();
  EXPECT_LT((w.grad() - w2.grad()).abs().amax().item(), 0.05 * (w2.grad().abs().amax().item() + 1e-3));
}

// Under autocast, cross entropy reads 16-bit logits as they are (no float32 copy to save for
// the grad): its loss is float32, and loss and grad equal those through the float32 copy
// exactly, since widening bfloat16 to float32 is exact.
TEST(Autocast, CrossEntropyReadsHalfLogitsWithTheFloat32CopysResults) {
  const Tensor base = (randn({6, 11}) * 4.0).to(DType::BFloat16);
  const Tensor t = from_vector<int64_t>({0, 10, -100, 3, 7, 7}, {6}, DType::Int64);
  Tensor logits = base.detach().requires_grad_(true);
  Tensor loss;
  {
    autocast scope(DType::BFloat16);
    loss = cross_entropy(logits, t);
  }
  EXPECT_EQ(loss.dtype(), DType::Float32);
  loss.backward();
  Tensor ref_logits = base.detach().requires_grad_(true);
  Tensor ref = cross_entropy(ref_logits.to(DType::Float32), t);
  ref.backward();
  EXPECT_EQ(loss.item(), ref.item());
  ASSERT_TRUE(logits.grad().defined());
  EXPECT_EQ(logits.grad().dtype(), DType::BFloat16);
  EXPECT_EQ((logits.grad().to(DType::Float32) - ref_logits.grad().to(DType::Float32)).abs().amax().item(), 0.0);
  // Outside autocast, 16-bit logits keep their dtype for the loss.
  EXPECT_EQ(cross_entropy(base, t).dtype(), DType::BFloat16);
}

TEST(Autocast, CompiledFunctionsGuardOnTheScope) {
  Tensor w = randn({8, 8});
  auto f = compile([&](const Tensor& x) { return matmul(x, w); });
  Tensor x = randn({2, 8});
  EXPECT_EQ(f(x).dtype(), DType::Float32);
  {
    autocast scope(DType::BFloat16);
    EXPECT_EQ(f(x).dtype(), DType::BFloat16);
  }
  EXPECT_EQ(f(x).dtype(), DType::Float32);
  EXPECT_EQ(f.stats().traces, 2);
}

}  // namespace
}  // namespace ember::test
