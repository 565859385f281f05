// Dtypes in generated pointwise kernels. float16 and bfloat16: stored as their bits, computed in
// float, rounded once on store; chains over broadcast inputs (the row loop), flat and streamed
// outputs, and training (grads through fused kernels) match eager within the 16-bit types'
// rounding (eager rounds after every op, a fused group only at its output). Casts to floating
// dtypes, comparisons (bool results, stored as bytes) and where fuse with eager's values.
#include <gtest/gtest.h>

#include "compiler/compiler_test_util.h"
#include "compiler/toolchain.h"
#include "core/shape.h"
#include "ember/autograd.h"

namespace ember {
namespace {

using test::CacheDir;

// |a - b| <= tol * (1 + |b|) elementwise, compared in float64.
::testing::AssertionResult near(const Tensor& a, const Tensor& b, double tol) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << "metadata differs: " << a.shape_str() << " "
                                         << dtype_name(a.dtype()) << " vs " << b.shape_str()
                                         << " " << dtype_name(b.dtype());
  const std::vector<double> x = a.to(DType::Float64).to_vector<double>();
  const std::vector<double> y = b.to(DType::Float64).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(std::abs(x[i] - y[i]) <= tol * (1 + std::abs(y[i]))))
      return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " vs " << y[i];
  return ::testing::AssertionSuccess();
}

// A few roundings of the type apart: eager rounds after each of the chain's 6 ops.
double tolerance(DType t) { return t == DType::BFloat16 ? 6 * 0.0078125 : 6 * 0.0009765625; }

class DtypeFusionTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(compiler::compiler_available()); }
  CacheDir dir{test::kSharedCompilerCache};
};

TEST_F(DtypeFusionTest, PointwiseChainsFuseAndMatchEager) {
  NoGradGuard no_grad;
  auto chain = [](const Tensor& x, const Tensor& y) {
    return ((x * y + 1.0).tanh() - x).relu() * 0.5;
  };
  for (DType t : {DType::BFloat16, DType::Float16}) {
    const std::string load = t == DType::BFloat16 ? "bf16_to_float(" : "half_to_float(";
    const std::string store = t == DType::BFloat16 ? "float_to_bf16(" : "float_to_half(";
    // [37, 65] against a row [65]: the row loop; [4096, 2100] (over 16 MiB) against one of its
    // shape: a flat loop whose output is streamed; [5]: a small flat one.
    for (const Shape& s : {Shape{37, 65}, Shape{4096, 2100}, Shape{5}}) {
      const bool big = s.size() == 2 && s[0] == 4096;
      Tensor x = randn(s).to(t), y = randn(big ? s : Shape{s.back()}).to(t);
      auto f = compile(chain, test::spy_opts());
      const Tensor got = f(x, y);
      EXPECT_TRUE(near(got, chain(x, y), tolerance(t))) << dtype_name(t) << " " << shape_str(s);
      const std::string& src = test::last_source();
      EXPECT_TRUE(test::has(src, load)) << src;
      EXPECT_TRUE(test::has(src, store)) << src;
      EXPECT_TRUE(test::has(src, "6 nodes fused")) << src;
      EXPECT_EQ(test::has(src, "ember_stream(out + i0"), big) << src;
    }
  }
}

TEST_F(DtypeFusionTest, TrainingThroughFusedKernels) {
  for (DType t : {DType::BFloat16, DType::Float16}) {
    auto loss = [](const Tensor& x, const Tensor& w) { return ((x * w).sigmoid() * x).sum(); };
    auto f = compile(loss, test::compiler_opts());
    Tensor x = randn({16, 40}).to(t);
    Tensor w1 = randn({40}).to(t).requires_grad_(true), w2 = w1.detach().requires_grad_(true);
    const Tensor got = f(x, w1), want = loss(x, w2);
    got.backward();
    want.backward();
    EXPECT_TRUE(near(got, want, 4 * tolerance(t))) << dtype_name(t);
    ASSERT_TRUE(w1.grad().defined());
    EXPECT_EQ(w1.grad().dtype(), t);
    EXPECT_TRUE(near(w1.grad(), w2.grad(), 4 * tolerance(t))) << dtype_name(t);
  }
}

// Casts to floating dtypes fuse: conversions in the loop, a 16-bit target rounded where eager
// rounds it (so these chains match eager exactly in float32 after the casts' roundings).
TEST_F(DtypeFusionTest, CastsFuseAndRoundAsEager) {
  NoGradGuard no_grad;
  auto mixed = [](const Tensor& x, const Tensor& i) {
    Tensor h = (x * 3.0).to(DType::BFloat16);                 // rounded to bf16 here
    Tensor back = h.to(DType::Float32) + i.to(DType::Float32);  // int64 -> float
    return (back.to(DType::Float64) * 0.5).to(DType::Float16);
  };
  Tensor x = randn({9, 33}), i = randint(-50, 50, {9, 33});
  auto f = compile(mixed, test::spy_opts());
  const Tensor got = f(x, i), want = mixed(x, i);
  ASSERT_EQ(got.dtype(), DType::Float16);
  // Every step rounds where eager rounds: the same bits.
  EXPECT_EQ(got.to(DType::Float32).to_vector<float>(), want.to(DType::Float32).to_vector<float>());
  const std::string& src = test::last_source();
  EXPECT_TRUE(test::has(src, "8 nodes fused")) << src;
  EXPECT_TRUE(test::has(src, "float_to_bf16(float(")) << src;
  EXPECT_TRUE(test::has(src, "const int64_t* __restrict")) << src;
  // Casts to integers stay eager kernels.
  auto to_int = [](const Tensor& x) { return (x * 4.0).to(DType::Int32) + 1; };
  auto g = compile(to_int, test::spy_opts());
  EXPECT_EQ(g(x).to_vector<int32_t>(), to_int(x).to_vector<int32_t>());
}

// Comparisons and where in one kernel with the arithmetic around them: relu written as a
// select, a mask computed and returned, a bool input compared again.
TEST_F(DtypeFusionTest, ComparisonsAndWhereFuse) {
  NoGradGuard no_grad;
  auto select = [](const Tensor& x, const Tensor& y, const Tensor& m) {
    Tensor pos = (x * 2.0).gt(y);                     // f32 -> bool
    Tensor out = (x + 1.0).where(pos, y * 0.5);       // bool, f32, f32 -> f32
    Tensor both = pos.eq(m);                          // bool == bool
    return std::vector<Tensor>{out.exp(), both, x.where(x.le(0.0), y)};
  };
  for (DType t : {DType::Float32, DType::BFloat16, DType::Float64}) {
    Tensor x = randn({31, 40}).to(t), y = randn({40}).to(t);
    Tensor m = randn({31, 40}).gt(0.0);
    auto f = compile(select, test::spy_opts());
    const std::vector<Tensor> got = f(x, y, m), want = select(x, y, m);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[1].dtype(), DType::Bool);
    EXPECT_EQ(got[1].to(DType::Int64).to_vector<int64_t>(),
              want[1].to(DType::Int64).to_vector<int64_t>())
        << dtype_name(t);
    EXPECT_TRUE(near(got[0], want[0], t == DType::BFloat16 ? tolerance(t) : 1e-6)) << dtype_name(t);
    EXPECT_TRUE(near(got[2], want[2], 0)) << dtype_name(t);  // a select: exact
    const std::string& src = test::last_source();
    EXPECT_TRUE(test::has(src, "ember::fn::Where{}(")) << src;
    EXPECT_TRUE(test::has(src, "ember::fn::Gt{}(")) << src;
    EXPECT_TRUE(test::has(src, "uint8_t(")) << src;
  }
}

}  // namespace
}  // namespace ember
