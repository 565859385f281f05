// Reductions and row-wise ops: errors, edge values (ties, NaN, infinities, ignored targets) and
// grads that the table-driven cases cannot express.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "ember/ember.h"

namespace ember {
namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNan = std::numeric_limits<double>::quiet_NaN();

Tensor vec(std::initializer_list<double> v, DType t = DType::Float64) {
  return tensor(v, t);
}

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

// Runs f and returns the message of the ember::Error it throws ("" if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- errors ----

TEST(ReductionErrors, DimOutOfRangeNamesTheOp) {
  Tensor x = zeros({2, 3});
  EXPECT_NE(error_of([&] { x.sum({2}); }).find("sum"), std::string::npos);
  EXPECT_NE(error_of([&] { x.mean({-3}); }).find("mean"), std::string::npos);
  EXPECT_NE(error_of([&] { x.amax({5}); }).find("amax"), std::string::npos);
  EXPECT_NE(error_of([&] { x.argmax(2); }).find("argmax"), std::string::npos);
  EXPECT_NE(error_of([&] { x.var({3}); }).find("var"), std::string::npos);
  EXPECT_NE(error_of([&] { x.std({3}); }).find("std"), std::string::npos);
  EXPECT_NE(error_of([&] { x.logsumexp({4}); }).find("logsumexp"), std::string::npos);
  EXPECT_NE(error_of([&] { x.softmax(2); }).find("softmax"), std::string::npos);
  EXPECT_NE(error_of([&] { x.log_softmax(-3); }).find("log_softmax"), std::string::npos);
}

TEST(ReductionErrors, RepeatedDim) {
  Tensor x = zeros({2, 3});
  EXPECT_THROW(x.sum({1, -1}), Error);
  EXPECT_THROW(x.amin({0, 0}), Error);
}

TEST(ReductionErrors, ExtremesOfNothing) {
  Tensor x = zeros({0, 3});
  std::string msg = error_of([&] { x.amax({0}); });
  EXPECT_NE(msg.find("amax"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[0, 3]"), std::string::npos) << msg;
  EXPECT_THROW(x.amin(), Error);
  EXPECT_THROW(x.argmax(), Error);
  EXPECT_THROW(x.argmin(0), Error);
  // Reducing the non-empty dim of an empty tensor is fine: nothing to compute.
  EXPECT_EQ(x.amax({1}).sizes(), Shape({0}));
  EXPECT_EQ(x.argmax(1).sizes(), Shape({0}));
}

TEST(LayerNormErrors, ShapesMustMatch) {
  Tensor x = zeros({2, 3, 4});
  std::string msg = error_of([&] { layer_norm(x, {3}); });
  EXPECT_NE(msg.find("layer_norm"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3, 4]"), std::string::npos) << msg;
  EXPECT_THROW(layer_norm(x, {}), Error);
  EXPECT_THROW(layer_norm(x, {1, 2, 3, 4}), Error);
  EXPECT_THROW(layer_norm(x, {4}, zeros({3})), Error);
  EXPECT_THROW(layer_norm(x, {4}, Tensor(), zeros({4, 1})), Error);
  EXPECT_THROW(layer_norm(zeros({2, 4}, DType::Int64), {4}), Error);
}

TEST(CrossEntropyErrors, TargetOutOfRangeNamesValueAndClasses) {
  Tensor logits = zeros({3, 5});
  Tensor targets = from_vector(std::vector<int64_t>{1, 7, 0}, {3}, DType::Int64);
  std::string msg = error_of([&] { cross_entropy(logits, targets); });
  EXPECT_NE(msg.find("cross_entropy"), std::string::npos) << msg;
  EXPECT_NE(msg.find("7"), std::string::npos) << msg;
  EXPECT_NE(msg.find("5 classes"), std::string::npos) << msg;
  Tensor negative = from_vector(std::vector<int64_t>{1, -1, 0}, {3}, DType::Int64);
  EXPECT_NE(error_of([&] { cross_entropy(logits, negative); }).find("-1"), std::string::npos);
  // -1 is fine when it is the ignore_index.
  EXPECT_NO_THROW(cross_entropy(logits, negative, -1));
}

TEST(CrossEntropyErrors, BadShapesAndDtypes) {
  Tensor logits = zeros({3, 5});
  Tensor t3 = zeros({3}, DType::Int64);
  EXPECT_THROW(cross_entropy(logits, zeros({4}, DType::Int64)), Error);
  EXPECT_THROW(cross_entropy(logits, zeros({3, 1}, DType::Int64)), Error);
  std::string msg = error_of([&] { cross_entropy(logits, zeros({3})); });
  EXPECT_NE(msg.find("integer"), std::string::npos) << msg;
  EXPECT_THROW(cross_entropy(zeros({3, 5}, DType::Int64), t3), Error);
  EXPECT_THROW(cross_entropy(zeros({}), zeros({}, DType::Int64)), Error);
  EXPECT_THROW(cross_entropy(zeros({3, 0}), t3), Error);
}

// ---- values ----

TEST(Reductions, IntegerSumsAndMeans) {
  Tensor x = from_vector(std::vector<int32_t>{1, 2, 3, 4}, {2, 2}, DType::Int32);
  Tensor s = x.sum({0});
  EXPECT_EQ(s.dtype(), DType::Int64);
  EXPECT_EQ(values(s), (std::vector<double>{4, 6}));
  Tensor m = x.mean();
  EXPECT_EQ(m.dtype(), DType::Float32);
  EXPECT_DOUBLE_EQ(m.item(), 2.5);
  Tensor b = from_vector(std::vector<int64_t>{1, 0, 1}, {3}, DType::Int64).to(DType::Bool);
  EXPECT_EQ(b.sum().item(), 2);
  EXPECT_EQ(b.amax().dtype(), DType::Bool);
  EXPECT_EQ(b.amax().item(), 1);
  EXPECT_EQ(b.amin().item(), 0);
  EXPECT_EQ(b.argmin().item(), 1);
}

TEST(Reductions, NanPropagatesThroughExtremes) {
  Tensor x = vec({1, kNan, 3, kNan});
  EXPECT_TRUE(std::isnan(x.amax().item()));
  EXPECT_TRUE(std::isnan(x.amin().item()));
  EXPECT_EQ(x.argmax().item(), 1);  // the first NaN
  EXPECT_EQ(x.argmin().item(), 1);
  // Long rows go through the lane loops: the NaN must survive their merges.
  Tensor big = zeros({3, 1000}, DType::Float32);
  {
    NoGradGuard g;
    big.select(0, 1).narrow(0, 777, 1).fill_(kNan);
  }
  std::vector<double> mx = values(big.amax({1}));
  EXPECT_FALSE(std::isnan(mx[0]));
  EXPECT_TRUE(std::isnan(mx[1]));
  EXPECT_EQ(values(big.argmax(1)), (std::vector<double>{0, 777, 0}));
}

TEST(Reductions, ArgExtremesTakeTheFirstTie) {
  Tensor x = vec({1, 5, 2, 5, 5, -1, -1});
  EXPECT_EQ(x.argmax().item(), 1);
  EXPECT_EQ(x.argmin().item(), 5);
  // Ties in different lanes of a long row.
  Tensor y = zeros({2000}, DType::Float32);
  EXPECT_EQ(y.argmax().item(), 0);
  EXPECT_EQ(y.argmin().item(), 0);
  Tensor m = vec({3, 1, 3, 1}).reshape({2, 2});
  EXPECT_EQ(values(m.argmax(0)), (std::vector<double>{0, 0}));
  EXPECT_EQ(m.argmax(0).dtype(), DType::Int64);
  EXPECT_EQ(m.argmax(1, true).sizes(), Shape({2, 1}));
  EXPECT_EQ(vec({4}).reshape({}).argmax(0, true).sizes(), Shape({}));
}

TEST(Reductions, VarianceIsStableForLargeOffsets) {
  // A one-pass sum-of-squares formula loses everything here in float32.
  std::vector<float> v;
  for (int i = 0; i < 1000; ++i) v.push_back(1e4f + float(i % 2));
  Tensor x = from_vector(v, {1000});
  EXPECT_NEAR(x.var({}, 0).item(), 0.25, 1e-4);
  EXPECT_NEAR(x.std({}, 0).item(), 0.5, 1e-4);
  // Divisor max(0, N - correction): a single element with correction 1 is 0/0.
  EXPECT_TRUE(std::isnan(vec({3}).var().item()));
  EXPECT_EQ(vec({1, 3}).var({}, 2).item(), kInf);
}

TEST(Reductions, LogsumexpOfInfinities) {
  EXPECT_EQ(vec({-kInf, -kInf}).logsumexp({0}).item(), -kInf);
  EXPECT_EQ(vec({1, kInf}).logsumexp({0}).item(), kInf);
  EXPECT_NEAR(vec({-kInf, 0}).logsumexp({0}).item(), 0, 1e-12);
  EXPECT_EQ(zeros({0}).logsumexp({0}).item(), -kInf);
}

TEST(Reductions, SumOfLongRowIsAccurate) {
  // Ten million times 0.1f: one float accumulator drifts by several percent here.
  const int64_t n = 10000000;
  const double want = double(n) * double(0.1f);
  EXPECT_NEAR(full({n}, 0.1).sum().item(), want, 1e-6 * want);
  // The same down a column (a stride-0 column: no memory behind it).
  for (double got : values(full({1, 2}, 0.1).expand({n, 2}).sum({0})))
    EXPECT_NEAR(got, want, 1e-6 * want);
}

TEST(Reductions, ResultsDoNotDependOnTheThreadCount) {
  // Chunks and row blocks, not threads, decide how partial sums combine.
  std::vector<float> v;
  for (int i = 0; i < 3 * 50000; ++i) v.push_back(float(std::sin(i * 0.37)) * 1000.f);
  Tensor x = from_vector(v, {3, 50000});
  auto run = [&](int threads) {
    int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<std::vector<double>> r = {values(x.sum({1})), values(x.sum()),
                                          values(x.reshape({5000, 30}).sum({0})),
                                          values(x.reshape({1000, 150}).var({0}))};
    omp_set_num_threads(before);
    return r;
  };
  EXPECT_EQ(run(1), run(3));
}

TEST(Softmax, RowsWithNegativeInfinity) {
  Tensor x = vec({0, -kInf, 0});
  EXPECT_EQ(values(x.softmax(0)), (std::vector<double>{0.5, 0, 0.5}));
  std::vector<double> ls = values(x.log_softmax(0));
  EXPECT_NEAR(ls[0], std::log(0.5), 1e-12);
  EXPECT_EQ(ls[1], -kInf);
  EXPECT_EQ(x.softmax(0).dtype(), DType::Float64);
  Tensor ints = from_vector(std::vector<int64_t>{1, 1}, {2}, DType::Int64);
  EXPECT_EQ(values(ints.softmax(0)), (std::vector<double>{0.5, 0.5}));
}

// ---- grads ----

TEST(ReductionGrads, ExtremeGradIsSplitAmongTies) {
  Tensor x = vec({1, 3, 3, 2}).requires_grad_();
  x.amax().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 0.5, 0.5, 0}));
  Tensor y = vec({1, 1, 1, 2, 0, 2}).reshape({2, 3}).requires_grad_();
  y.amin({1}).sum().backward();
  EXPECT_EQ(values(y.grad()), (std::vector<double>{1.0 / 3, 1.0 / 3, 1.0 / 3, 0, 1, 0}));
}

TEST(ReductionGrads, ArgExtremesRecordNoHistory) {
  Tensor x = vec({1, 3, 2}).requires_grad_();
  Tensor i = x.argmax();
  EXPECT_FALSE(i.requires_grad());
  EXPECT_EQ(i.dtype(), DType::Int64);
}

TEST(CrossEntropy, IgnoredTargets) {
  Tensor logits = vec({1, 2, 3, 4, 0, 1}).reshape({2, 3}).requires_grad_();
  Tensor t = from_vector(std::vector<int64_t>{2, -100}, {2}, DType::Int64);
  Tensor loss = cross_entropy(logits, t);
  // Only the first row counts: lse(1, 2, 3) - 3.
  double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(loss.item(), lse - 3, 1e-12);
  loss.backward();
  std::vector<double> g = values(logits.grad());
  EXPECT_NEAR(g[0], std::exp(1 - lse), 1e-12);
  EXPECT_NEAR(g[2], std::exp(3 - lse) - 1, 1e-12);
  for (int i = 3; i < 6; ++i) EXPECT_EQ(g[i], 0) << i;
}

TEST(CrossEntropy, AllIgnoredIsNanWithZeroGrad) {
  Tensor logits = vec({1, 2, 3, 4}).reshape({2, 2}).requires_grad_();
  Tensor t = from_vector(std::vector<int64_t>{-100, -100}, {2}, DType::Int64);
  Tensor loss = cross_entropy(logits, t);
  EXPECT_TRUE(std::isnan(loss.item()));
  loss.backward();
  EXPECT_EQ(values(logits.grad()), (std::vector<double>{0, 0, 0, 0}));
}

TEST(CrossEntropy, HalfLogitsAndInt32Targets) {
  Tensor logits = vec({0, 10, 0, 0, 0, 10}).reshape({2, 3});
  Tensor t = from_vector(std::vector<int32_t>{1, 2}, {2}, DType::Int32);
  for (DType d : {DType::Float16, DType::BFloat16, DType::Float32}) {
    Tensor loss = cross_entropy(logits.to(d), t);
    EXPECT_EQ(loss.dtype(), d);
    EXPECT_NEAR(loss.item(), std::log(1 + 2 * std::exp(-10.0)), 1e-3);
  }
}

TEST(LayerNorm, GradsOfAllInputsWithSixteenBitTypes) {
  // Grads come back in the inputs' dtypes and agree with the float64 computation.
  Tensor x = vec({1, 2, 4, -1, 0, 3}).reshape({2, 3});
  Tensor w = vec({1, -2, 0.5}), b = vec({0, 1, 2});
  auto grads = [&](DType d) {
    Tensor xd = x.to(d).detach().requires_grad_();
    Tensor wd = w.to(d).detach().requires_grad_();
    Tensor bd = b.to(d).detach().requires_grad_();
    Tensor y = layer_norm(xd, {3}, wd, bd);
    EXPECT_EQ(y.dtype(), d);
    (y * vec({1, 2, 3, 4, 5, 6}).reshape({2, 3}).to(d)).sum().backward();
    EXPECT_EQ(xd.grad().dtype(), d);
    return std::vector<std::vector<double>>{values(xd.grad()), values(wd.grad()),
                                            values(bd.grad())};
  };
  auto want = grads(DType::Float64);
  for (DType d : {DType::Float32, DType::BFloat16}) {
    auto got = grads(d);
    for (size_t i = 0; i < want.size(); ++i)
      for (size_t j = 0; j < want[i].size(); ++j)
        EXPECT_NEAR(got[i][j], want[i][j], 0.05 * (1 + std::abs(want[i][j])))
            << dtype_name(d) << " input " << i << " element " << j;
  }
}

}  // namespace
}  // namespace ember
