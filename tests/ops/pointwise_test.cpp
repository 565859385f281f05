// Pointwise ops beyond the table-driven cases: argument errors (named by the op), NaN and
// tie semantics, in-place forms, and which ops record gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "dispatch/dispatcher.h"
#include "ember/ember.h"

namespace ember {
namespace {

// The message of the ember::Error that f throws ("" if it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR_NAMES(stmt, text)                              \
  do {                                                              \
    std::string msg_ = error_of([&] { stmt; });                     \
    EXPECT_NE(msg_.find(text), std::string::npos)                   \
        << "expected an error naming '" << text << "', got: '" << msg_ << "'"; \
  } while (0)

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// ---- errors ----

TEST(PointwiseErrors, WhereNeedsABoolCondition) {
  Tensor a = ones({3}), b = zeros({3});
  EXPECT_THROW(where(ones({3}), a, b), Error);
  EXPECT_ERROR_NAMES(where(tensor({1, 0, 1}, DType::Int64), a, b),
                     "where: the condition must be a bool");
  EXPECT_ERROR_NAMES(a.where(ones({3}, DType::Int32), b), "where");
  // The op itself checks too, for callers below the front end.
  EXPECT_ERROR_NAMES(dispatch1(OpId::where, {ones({3}), a, b}), "where");
  EXPECT_ERROR_NAMES(dispatch1(OpId::masked_fill, {a, ones({3})}), "masked_fill");
}

TEST(PointwiseErrors, WhereShapesMustBroadcast) {
  Tensor c = ones({3}, DType::Bool);
  EXPECT_ERROR_NAMES(where(c, ones({4}), ones({3})), "where");
  EXPECT_ERROR_NAMES(where(ones({2, 3}, DType::Bool), ones({3}), ones({4, 1})), "where");
  EXPECT_THROW(where(ones({2}, DType::Bool), ones({3}), ones({3})), Error);
}

TEST(PointwiseErrors, MaskedFillMask) {
  Tensor x = zeros({2, 3});
  EXPECT_ERROR_NAMES(x.masked_fill(ones({2, 3}), 1), "masked_fill: the mask must be a bool");
  // Broadcastable together, but the mask would grow the tensor.
  EXPECT_ERROR_NAMES(x.masked_fill(ones({4, 2, 3}, DType::Bool), 1), "masked_fill");
  EXPECT_ERROR_NAMES(x.masked_fill(ones({2}, DType::Bool), 1), "masked_fill");
  EXPECT_ERROR_NAMES(x.masked_fill_(ones({3, 3}, DType::Bool), 1), "masked_fill_");
  EXPECT_ERROR_NAMES(ones({3}).masked_fill_(ones({2, 3}, DType::Bool), 1), "masked_fill_");
}

TEST(PointwiseErrors, MaskedFillValueMustFitTheDtype) {
  Tensor m = ones({3}, DType::Bool);
  EXPECT_ERROR_NAMES(zeros({3}, DType::Int64).masked_fill(m, 2.5), "masked_fill: value 2.5");
  EXPECT_ERROR_NAMES(zeros({3}, DType::Int32).masked_fill(m, 1e10), "masked_fill");
  EXPECT_ERROR_NAMES(zeros({3}, DType::Int32).masked_fill(m, kNaN), "masked_fill");
  EXPECT_ERROR_NAMES(zeros({3}, DType::Float16).masked_fill(m, 1e6), "masked_fill");
  // Infinities are values of float types.
  EXPECT_EQ(values(zeros({3}, DType::Float16).masked_fill(m, -kInf))[0], -kInf);
  EXPECT_EQ(values(zeros({3}, DType::Int32).masked_fill(m, -2147483648.0))[2], -2147483648.0);
}

TEST(PointwiseErrors, ComparisonsOfMismatchedShapes) {
  Tensor a = ones({2, 3}), b = ones({4});
  EXPECT_ERROR_NAMES(a.eq(b), "eq: shapes [2, 3] and [4]");
  EXPECT_ERROR_NAMES(a.ne(b), "ne");
  EXPECT_ERROR_NAMES(a.lt(b), "lt");
  EXPECT_ERROR_NAMES(a.le(b), "le");
  EXPECT_ERROR_NAMES(a.gt(b), "gt");
  EXPECT_ERROR_NAMES(a.ge(b), "ge");
  EXPECT_ERROR_NAMES(a.maximum(b), "maximum");
  EXPECT_ERROR_NAMES(a.minimum(b), "minimum");
  EXPECT_ERROR_NAMES(a.pow(b), "pow");
}

TEST(PointwiseErrors, LogicalOpsOfMismatchedShapes) {
  Tensor a = ones({2, 3}, DType::Bool), b = ones({2}, DType::Bool);
  EXPECT_ERROR_NAMES(a.logical_and(b), "logical_and");
  EXPECT_ERROR_NAMES(a.logical_or(b), "logical_or");
  EXPECT_ERROR_NAMES(a.logical_xor(b), "logical_xor");
  EXPECT_ERROR_NAMES(Tensor().logical_not(), "logical_not");
}

TEST(PointwiseErrors, BoolTensorsRejectedWhereMeaningless) {
  Tensor b = ones({3}, DType::Bool);
  EXPECT_ERROR_NAMES(b.relu(), "relu");
  EXPECT_ERROR_NAMES(b.abs(), "abs");
  EXPECT_ERROR_NAMES(b.sign(), "sign");
  EXPECT_ERROR_NAMES(b.clamp(0, 1), "clamp");
  EXPECT_ERROR_NAMES(b.pow(2.0), "pow");
  EXPECT_ERROR_NAMES(ones({3}).pow(b), "pow");
}

TEST(PointwiseErrors, ClampBounds) {
  Tensor x = ones({3});
  EXPECT_ERROR_NAMES(x.clamp(std::nullopt, std::nullopt), "clamp: at least one of min and max");
  EXPECT_ERROR_NAMES(x.clamp(kNaN, 1), "clamp: min and max must not be NaN");
  EXPECT_ERROR_NAMES(x.clamp_(std::nullopt, std::nullopt), "clamp_");
  Tensor i = ones({3}, DType::Int64);
  EXPECT_ERROR_NAMES(i.clamp_(0.5, 2), "clamp_");
  EXPECT_ERROR_NAMES(i.clamp_(0, kInf), "clamp_");
}

TEST(PointwiseErrors, IntegerToNegativePower) {
  Tensor i = tensor({1, 2, 3}, DType::Int64);
  EXPECT_ERROR_NAMES(i.pow(-1.0), "pow: integers to negative integer powers");
  // A float exponent promotes instead.
  EXPECT_EQ(i.pow(-1.5).dtype(), DType::Float32);
}

TEST(PointwiseErrors, GeluBackwardHasNoGradient) {
  Tensor g = ones({3}).requires_grad_(), x = ones({3});
  EXPECT_ERROR_NAMES(dispatch1(OpId::gelu_backward, {g, x}), "gelu_backward has no gradient");
}

// ---- semantics ----

TEST(Pointwise, NaNPropagates) {
  Tensor x = tensor({kNaN, 1.0, -2.0});
  Tensor y = tensor({0.0, kNaN, -3.0});
  auto first_two_nan = [](const Tensor& t) {
    auto v = values(t);
    return std::isnan(v[0]) && std::isnan(v[1]);
  };
  EXPECT_TRUE(first_two_nan(x.maximum(y)));
  EXPECT_TRUE(first_two_nan(x.minimum(y)));
  EXPECT_EQ(values(x.maximum(y))[2], -2.0);
  EXPECT_EQ(values(x.minimum(y))[2], -3.0);
  EXPECT_TRUE(std::isnan(values(x.relu())[0]));
  EXPECT_TRUE(std::isnan(values(x.sign())[0]));
  EXPECT_TRUE(std::isnan(values(x.clamp(0, 1))[0]));
  EXPECT_TRUE(std::isnan(values(x.abs())[0]));
  // NaN compares unequal to everything and is true as a truth value.
  EXPECT_EQ(values(x.eq(x)), (std::vector<double>{0, 1, 1}));
  EXPECT_EQ(values(x.ne(x)), (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(values(x.logical_not()), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(values(x.logical_and(y)), (std::vector<double>{0, 1, 1}));
}

TEST(Pointwise, InfinitiesSaturate) {
  Tensor x = tensor({-kInf, kInf, 0.0});
  EXPECT_EQ(values(x.sigmoid()), (std::vector<double>{0, 1, 0.5}));
  EXPECT_EQ(values(x.tanh()), (std::vector<double>{-1, 1, 0}));
  EXPECT_EQ(values(x.relu()), (std::vector<double>{0, kInf, 0}));
  EXPECT_EQ(values(x.gelu())[1], kInf);
  EXPECT_EQ(values(x.clamp(-1, 1)), (std::vector<double>{-1, 1, 0}));
}

TEST(Pointwise, SignAndAbsOfIntegers) {
  Tensor x = tensor({-5, 0, 7}, DType::Int32);
  EXPECT_EQ(x.sign().dtype(), DType::Int32);
  EXPECT_EQ(values(x.sign()), (std::vector<double>{-1, 0, 1}));
  EXPECT_EQ(values(x.abs()), (std::vector<double>{5, 0, 7}));
  // abs of the most negative integer wraps, as two's complement does (no UB).
  Tensor m = tensor({-2147483648.0}, DType::Int32);
  EXPECT_EQ(values(m.abs())[0], -2147483648.0);
}

TEST(Pointwise, ResultDtypes) {
  Tensor i = tensor({1, 2}, DType::Int32);
  EXPECT_EQ(i.relu().dtype(), DType::Int32);
  EXPECT_EQ(i.tanh().dtype(), DType::Float32);
  EXPECT_EQ(i.gelu().dtype(), DType::Float32);
  EXPECT_EQ(i.clamp(0, 1).dtype(), DType::Int32);
  EXPECT_EQ(i.clamp(0.5, 1).dtype(), DType::Float32);
  EXPECT_EQ(i.pow(2.0).dtype(), DType::Int32);
  EXPECT_EQ(i.maximum(tensor({0.5}, DType::Float64)).dtype(), DType::Float64);
  EXPECT_EQ(i.lt(tensor({0.5})).dtype(), DType::Bool);
  EXPECT_EQ(values(i.lt(1.5)), (std::vector<double>{1, 0}));
  EXPECT_EQ(where(tensor({1, 0}).gt(0.5), i, tensor({0.5, 0.5})).dtype(), DType::Float32);
  EXPECT_EQ(i.logical_and(tensor({0.0, 3.0})).dtype(), DType::Bool);
}

// ---- gradients ----

TEST(PointwiseGrad, MaximumMinimumSplitTiesEvenly) {
  for (bool use_max : {true, false}) {
    Tensor a = tensor({1.0, 2.0, 3.0}, DType::Float64).requires_grad_();
    Tensor b = tensor({1.0, 5.0, 0.0}, DType::Float64).requires_grad_();
    Tensor y = use_max ? a.maximum(b) : a.minimum(b);
    y.sum().backward();
    if (use_max) {
      EXPECT_EQ(values(a.grad()), (std::vector<double>{0.5, 0, 1}));
      EXPECT_EQ(values(b.grad()), (std::vector<double>{0.5, 1, 0}));
    } else {
      EXPECT_EQ(values(a.grad()), (std::vector<double>{0.5, 1, 0}));
      EXPECT_EQ(values(b.grad()), (std::vector<double>{0.5, 0, 1}));
    }
  }
}

TEST(PointwiseGrad, BroadcastTiesSumBack) {
  // b broadcasts against three elements, two of which tie with it.
  Tensor a = tensor({1.0, 1.0, 0.0}, DType::Float64).requires_grad_();
  Tensor b = tensor({1.0}, DType::Float64).requires_grad_();
  a.maximum(b).sum().backward();
  EXPECT_EQ(values(a.grad()), (std::vector<double>{0.5, 0.5, 0}));
  EXPECT_EQ(values(b.grad()), (std::vector<double>{2.0}));
}

TEST(PointwiseGrad, PowAtZeroBase) {
  // d/db 0^b is taken as 0 for b >= 0 (not 0 * log 0 = NaN); d/da a^0 is 0.
  Tensor a = tensor({0.0, 0.0, 2.0}, DType::Float64).requires_grad_();
  Tensor b = tensor({2.0, 0.0, 0.0}, DType::Float64).requires_grad_();
  a.pow(b).sum().backward();
  EXPECT_EQ(values(a.grad()), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(values(b.grad()), (std::vector<double>{0, 0, std::log(2.0)}));
  Tensor x = tensor({0.0, 3.0}, DType::Float64).requires_grad_();
  x.pow(0.0).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 0}));
}

TEST(PointwiseGrad, ReluAndClampPassGradientInside) {
  Tensor x = tensor({-1.0, 0.5, 2.0}, DType::Float64).requires_grad_();
  (x.relu() * 3.0).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 3, 3}));
  Tensor z = tensor({-1.0, 0.5, 2.0, 1.0}, DType::Float64).requires_grad_();
  z.clamp(0, 1).sum().backward();
  EXPECT_EQ(values(z.grad()), (std::vector<double>{0, 1, 0, 1}));  // bounds are inside
}

TEST(PointwiseGrad, NonDifferentiableOutputsRecordNothing) {
  Tensor x = tensor({-1, 2, 0, 3}).requires_grad_();
  EXPECT_FALSE(x.sign().requires_grad());
  EXPECT_FALSE(x.gt(0.0).requires_grad());
  EXPECT_FALSE(x.logical_not().requires_grad());
  EXPECT_TRUE(x.masked_fill(x.gt(0.0), 0).requires_grad());
  EXPECT_TRUE(where(x.gt(0.0), x, zeros({4})).requires_grad());
}

// ---- in place ----

TEST(PointwiseInplace, MaskedFillWritesThroughStridedViews) {
  Tensor x = arange(0, 6, 1, DType::Float32).view({2, 3});
  Tensor xt = x.t();  // [3, 2], non-contiguous
  uint32_t before = x.version();
  xt.masked_fill_(tensor({1, 0}).gt(0.5), -1);  // column 0 of xt = row 0 of x
  EXPECT_EQ(values(x), (std::vector<double>{-1, -1, -1, 3, 4, 5}));
  EXPECT_GT(x.version(), before);
  // A mask computed from the tensor itself.
  Tensor y = tensor({-2, 3, -4, 5});
  Tensor& r = y.masked_fill_(y.lt(0.0), 0);
  EXPECT_EQ(&r, &y);
  EXPECT_EQ(values(y), (std::vector<double>{0, 3, 0, 5}));
}

TEST(PointwiseInplace, ClampInPlace) {
  Tensor x = tensor({-3, 0.5, 9});
  x.clamp_(-1, 1);
  EXPECT_EQ(values(x), (std::vector<double>{-1, 0.5, 1}));
  Tensor i = tensor({-3, 0, 9}, DType::Int64);
  i.clamp_(std::nullopt, 4);
  EXPECT_EQ(i.dtype(), DType::Int64);
  EXPECT_EQ(values(i), (std::vector<double>{-3, 0, 4}));
  Tensor m = arange(0, 6, 1, DType::Float64).view({2, 3}).t();
  m.clamp_(1, 3);
  EXPECT_EQ(values(m.contiguous()), (std::vector<double>{1, 3, 1, 3, 2, 3}));
}

TEST(PointwiseInplace, RecordsGradientsOnNonLeaves) {
  Tensor x = tensor({-2.0, 0.5, 3.0}, DType::Float64).requires_grad_();
  Tensor y = x * 2.0;
  y.clamp_(-1, 1);
  y.masked_fill_(tensor({0, 0, 1}).gt(0.5), 7);
  EXPECT_EQ(values(y), (std::vector<double>{-1, 1, 7}));
  y.sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 2, 0}));
  // Leaves that require grad cannot be modified in place.
  EXPECT_ERROR_NAMES(x.clamp_(0, 1), "clamp_");
  EXPECT_ERROR_NAMES(x.masked_fill_(x.gt(0.0), 0), "masked_fill_");
}

}  // namespace
}  // namespace ember
