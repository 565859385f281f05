// matmul, bmm and linear beyond the op table: shape and dtype errors naming the op, layouts
// that BLAS cannot take directly, integer wrap-around, and gradients of broadcast operands.
#include <gtest/gtest.h>

#include "ember/ember.h"
#include "support/expect_error.h"

namespace ember {
namespace {

using test::expect_error;

Tensor seq(const Shape& s, DType t = DType::Float64) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return arange(0, double(n), 1, t).reshape(s);
}

TEST(Matmul, ShapeAndDtypeErrors) {
  expect_error(
      [] {
        matmul(ones({2, 3}), ones({4, 2}));
      },
      {"matmul", "[2, 3]", "[4, 2]", "3 != 4"});
  expect_error([] { matmul(ones({3}), ones({4})); }, {"matmul", "3 != 4"});
  expect_error([] { matmul(ones({}), ones({3})); }, {"matmul", "at least 1 dim"});
  expect_error([] { matmul(ones({2, 2, 3}), ones({3, 3, 4})); }, {"matmul", "batch", "2 vs 3"});
  expect_error(
      [] {
        matmul(ones({2, 2}, DType::Bool), ones({2, 2}, DType::Bool));
      },
      {"matmul", "bool"});
}

TEST(Matmul, BmmAndLinearErrors) {
  expect_error([] { bmm(ones({2, 3}), ones({3, 2})); }, {"bmm", "3-D"});
  expect_error([] { bmm(ones({2, 2, 3}), ones({3, 3, 2})); }, {"bmm", "batch"});
  expect_error([] { bmm(ones({2, 2, 3}), ones({2, 2, 2})); }, {"bmm", "3 != 2"});
  expect_error([] { linear(ones({2, 3}), ones({4, 5})); }, {"linear", "[2, 3]", "[4, 5]"});
  expect_error([] { linear(ones({2, 3}), ones({4})); }, {"linear", "2-D"});
  expect_error([] { linear(ones({2, 3}), ones({4, 3}), ones({3})); }, {"linear", "bias", "[4]"});
}

TEST(Matmul, PromotesMixedDtypes) {
  Tensor r = matmul(seq({2, 2}, DType::Int64), seq({2, 2}, DType::Float32));
  EXPECT_EQ(r.dtype(), DType::Float32);
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{2, 3, 6, 11}));
}

TEST(Matmul, LayoutsBlasCannotTakeAreCopied) {
  // Rows of b repeat (stride 0) and a's columns are strided by 2: neither is a BLAS layout.
  Tensor a = seq({2, 6}).slice(1, 0, 6, 2);  // [2, 3], strides [6, 2]
  Tensor b =
      from_vector(std::vector<double>{1, 2}, {1, 2}).expand({3, 2});  // [3, 2], strides [0, 1]
  Tensor r = matmul(a, b);
  // a = [[0, 2, 4], [6, 8, 10]]; every row of b is [1, 2].
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{6, 12, 24, 48}));
  // A batch broadcast by expand (stride 0 over the batch) goes to BLAS matrix by matrix.
  Tensor eb = seq({1, 3, 2}).expand({4, 3, 2});
  Tensor rb = matmul(seq({4, 2, 3}), eb);
  Tensor want = matmul(seq({4, 2, 3}), seq({3, 2}));
  EXPECT_EQ(rb.to_vector<double>(), want.to_vector<double>());
}

TEST(Matmul, IntegersWrapAround) {
  Tensor a = full({1, 2}, 65536, DType::Int32);
  Tensor b = full({2, 1}, 32768, DType::Int32);
  // 2 * 2^31 wraps to 0 in int32.
  EXPECT_EQ(matmul(a, b).item(), 0);
  EXPECT_EQ(matmul(a.to(DType::Int64), b.to(DType::Int64)).item(), 4294967296.0);
}

TEST(Matmul, GradientsOfBroadcastOperandsAreSummed) {
  Tensor a = seq({3, 2, 4}).requires_grad_();
  Tensor b = seq({4, 5}).requires_grad_();
  matmul(a, b).sum().backward();
  // d/db sum(a @ b) = sum over batch and rows of a, repeated along columns.
  Tensor want_b = a.detach().sum({0, 1}).reshape({4, 1}).expand({4, 5});
  EXPECT_EQ(b.grad().to_vector<double>(), want_b.contiguous().to_vector<double>());
  Tensor want_a = b.detach().sum({1}).reshape({1, 1, 4}).expand({3, 2, 4});
  EXPECT_EQ(a.grad().to_vector<double>(), want_a.contiguous().to_vector<double>());
}

TEST(Matmul, LinearGradientWithBias) {
  Tensor x = seq({2, 3}).requires_grad_();
  Tensor w = seq({4, 3}).requires_grad_();
  Tensor bias = zeros({4}, DType::Float64).requires_grad_();
  linear(x, w, bias).sum().backward();
  EXPECT_EQ(bias.grad().to_vector<double>(), (std::vector<double>{2, 2, 2, 2}));
  // d/dw sum(x w^T) = column sums of x for every output row.
  EXPECT_EQ(w.grad().to_vector<double>(),
            (std::vector<double>{3, 5, 7, 3, 5, 7, 3, 5, 7, 3, 5, 7}));
  // d/dx = column sums of w for every input row.
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{18, 22, 26, 18, 22, 26}));
}

}  // namespace
}  // namespace ember
