// Index ops beyond the op table: bad indices in the data, wrong index dtypes, mismatched
// shapes (all ember::Errors naming the op), and behaviour worth pinning down (cat promotion,
// topk ordering of ties and NaN, gradients flowing through embedding and topk).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ember/ember.h"
#include "support/expect_error.h"

namespace ember {
namespace {

using test::expect_error;

Tensor idx(std::vector<int64_t> v) {
  return from_vector(v, {int64_t(v.size())}, DType::Int64);
}

TEST(IndexSelect, OutOfRangeIndexNamesOpIndexAndSize) {
  Tensor x = ones({3, 4});
  expect_error([&] { x.index_select(0, idx({0, 5, 1})); }, {"index_select", "index 5", "size 3"});
  expect_error([&] { x.index_select(1, idx({-1})); }, {"index_select", "index -1", "size 4"});
  Tensor big = zeros({100000});
  Tensor many = full({50000}, 2, DType::Int64);
  expect_error([&] { big.index_select(0, many.add(full({50000}, 100000, DType::Int64))); },
               {"index_select", "index 100002", "size 100000"});
}

TEST(IndexSelect, RejectsBadIndexDtypeAndRank) {
  Tensor x = ones({3, 4});
  expect_error([&] { x.index_select(0, tensor({0, 1})); }, {"index_select", "int64", "float32"});
  expect_error([&] { x.index_select(0, zeros({2, 2}, DType::Int64)); }, {"index_select", "1-D"});
  expect_error([&] { x.index_select(2, idx({0})); }, {"index_select", "dim 2"});
}

TEST(IndexSelect, AcceptsInt32AndZeroDimIndex) {
  Tensor x = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor r = x.index_select(0, from_vector(std::vector<int32_t>{2, 0}, {2}, DType::Int32));
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{5, 6, 1, 2}));
  Tensor s = x.index_select(0, scalar_tensor(1, DType::Int64));
  EXPECT_EQ(s.sizes(), (Shape{1, 2}));
  EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{3, 4}));
}

TEST(Gather, ErrorsOnBadIndicesAndShapes) {
  Tensor x = ones({3, 4});
  expect_error(
      [&] {
        x.gather(1, from_vector(std::vector<int64_t>{0, 4}, {1, 2}, DType::Int64));
      },
      {"gather", "index 4", "size 4"});
  expect_error([&] { x.gather(1, zeros({3}, DType::Int64)); }, {"gather", "dims"});
  expect_error([&] { x.gather(1, zeros({4, 2}, DType::Int64)); }, {"gather", "[4, 2]", "dim 0"});
  expect_error([&] { x.gather(0, zeros({2, 2}, DType::Bool)); }, {"gather", "bool"});
}

TEST(IndexAdd, ErrorsOnBadIndicesAndShapes) {
  Tensor x = zeros({4, 3});
  expect_error(
      [&] {
        index_add(x, 0, idx({1, 4}), ones({2, 3}));
      },
      {"index_add", "index 4", "size 4"});
  expect_error(
      [&] {
        index_add(x, 0, idx({1, 2}), ones({3, 3}));
      },
      {"index_add", "[3, 3]", "[2, 3]"});
  expect_error([&] { index_add(x, 0, tensor({1}), ones({1, 3})); }, {"index_add", "int64"});
  expect_error(
      [&] {
        index_add(x.to(DType::Bool), 0, idx({1}), ones({1, 3}, DType::Bool));
      },
      {"index_add", "bool"});
}

TEST(IndexAdd, AccumulatesRepeatedIndicesAndPromotes) {
  Tensor x = zeros({3}, DType::Int64);
  Tensor r = index_add(x, 0, idx({2, 2, 0}), from_vector(std::vector<double>{1.5, 2, 3}, {3}));
  EXPECT_EQ(r.dtype(), DType::Float32);
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{3, 0, 3.5}));
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{0, 0, 0}));  // functional: x unchanged
}

TEST(ScatterAdd, ErrorsOnBadIndicesAndShapes) {
  Tensor x = zeros({2, 3});
  Tensor bad = from_vector(std::vector<int64_t>{0, 3}, {1, 2}, DType::Int64);
  expect_error([&] { scatter_add(x, 1, bad, ones({1, 2})); }, {"scatter_add", "index 3", "size 3"});
  expect_error(
      [&] {
        scatter_add(x, 1, zeros({2, 3}, DType::Int64), ones({2, 2}));
      },
      {"scatter_add", "larger than src"});
  expect_error(
      [&] {
        scatter_add(x, 1, zeros({3, 1}, DType::Int64), ones({3, 1}));
      },
      {"scatter_add", "larger than input"});
  expect_error([&] { scatter_add(x, 1, zeros({2}, DType::Int64), ones({2})); },
               {"scatter_add", "same number of dims"});
}

TEST(Embedding, LooksUpRowsAndRejectsBadIndices) {
  Tensor w = from_vector(std::vector<double>{0, 1, 10, 11, 20, 21}, {3, 2});
  Tensor e = embedding(w, from_vector(std::vector<int64_t>{2, 0, 2, 1}, {2, 2}, DType::Int64));
  EXPECT_EQ(e.sizes(), (Shape{2, 2, 2}));
  EXPECT_EQ(e.to_vector<double>(), (std::vector<double>{20, 21, 0, 1, 20, 21, 10, 11}));
  expect_error([&] { embedding(w, idx({3})); }, {"embedding", "index 3", "size 3"});
  expect_error([&] { embedding(w, tensor({0})); }, {"embedding", "int64"});
  expect_error([&] { embedding(ones({3}), idx({0})); }, {"embedding", "2-D"});
}

TEST(Embedding, GradientAddsUpRepeatedRows) {
  Tensor w = zeros({4, 2}, DType::Float64).requires_grad_();
  Tensor e = embedding(w, idx({1, 3, 1, 1}));
  e.sum().backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{0, 0, 3, 3, 0, 0, 1, 1}));
}

TEST(Cat, PromotesSkipsLegacyEmptyAndChecksShapes) {
  Tensor a = from_vector(std::vector<int32_t>{1, 2}, {1, 2}, DType::Int32);
  Tensor b = from_vector(std::vector<double>{3.5, 4}, {1, 2}).to(DType::Float32);
  Tensor r = cat({a, zeros({0}), b}, 0);
  EXPECT_EQ(r.dtype(), DType::Float32);
  EXPECT_EQ(r.sizes(), (Shape{2, 2}));
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{1, 2, 3.5, 4}));
  expect_error([&] { cat({}, 0); }, {"cat", "non-empty"});
  expect_error([&] { cat({ones({2, 3}), ones({3, 2})}, 0); }, {"cat", "[2, 3]", "[3, 2]"});
  expect_error([&] { cat({ones({2, 3}), ones({3})}, 0); }, {"cat", "number of dims"});
  expect_error([&] { cat({ones({2}), ones({})}, 0); }, {"cat", "0-dim"});
  expect_error([&] { cat({ones({2})}, 1); }, {"cat", "dim 1"});
}

TEST(Cat, GradientSlicesBackToEachInput) {
  Tensor a = ones({2, 2}, DType::Float64).requires_grad_();
  Tensor b = ones({2, 1}, DType::Float64).requires_grad_();
  Tensor w = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  (cat({a, b}, 1) * w).sum().backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, 2, 4, 5}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{3, 6}));
}

TEST(Stack, ChecksShapes) {
  expect_error([&] { stack({ones({2}), ones({3})}); }, {"stack", "[2]", "[3]"});
  expect_error([&] { stack({ones({2})}, 2); }, {"stack", "dim 2"});
  EXPECT_EQ(stack({ones({2, 3}), zeros({2, 3})}, -1).sizes(), (Shape{2, 3, 2}));
}

TEST(Tri, NeedsTwoDims) {
  expect_error([&] { ones({3}).tril(); }, {"tril", "2 dims"});
  expect_error([&] { ones({}).triu(); }, {"triu", "2 dims"});
}

TEST(Topk, ChecksKAndDtype) {
  expect_error([&] { ones({2, 3}).topk(4); }, {"topk", "k = 4", "size 3"});
  expect_error([&] { ones({2, 3}).topk(-1); }, {"topk", "k = -1"});
  expect_error([&] { ones({2, 3}, DType::Bool).topk(1); }, {"topk", "bool"});
  expect_error([&] { ones({2, 3}).topk(1, 2); }, {"topk", "dim 2"});
}

TEST(Topk, TiesKeepLowerIndexAndNaNRanksHighest) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = from_vector(std::vector<double>{1, nan, 3, 3, -2, 1}, {6});
  auto [v, i] = x.topk(3);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(std::isnan(v.to_vector<double>()[0]));
  auto [sv, si] = x.topk(3, 0, /*largest=*/false, /*sorted=*/false);
  EXPECT_EQ(si.to_vector<int64_t>(), (std::vector<int64_t>{4, 0, 5}));
  EXPECT_EQ(sv.to_vector<double>(), (std::vector<double>{-2, 1, 1}));
  EXPECT_EQ(si.dtype(), DType::Int64);
}

TEST(Topk, ZeroDimInputAndGradient) {
  auto [v, i] = scalar_tensor(7, DType::Float32).topk(1);
  EXPECT_EQ(v.dim(), 0);
  EXPECT_EQ(v.item(), 7);
  EXPECT_EQ(i.item(), 0);
  Tensor x = from_vector(std::vector<double>{4, 1, 3, 2}, {2, 2}).requires_grad_();
  auto [tv, ti] = x.topk(1, 1);
  tv.sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 0, 1, 0}));
}

}  // namespace
}  // namespace ember
