// The layer_norm backward kernel (FusionGroup::ln_bwd): dx, dw and db of a compiled training
// step against eager autograd and against float64, with and without the affine grads, with dx
// added to another grad (a residual stream) or not, on one thread's rows and on many.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler/compiler_test_util.h"
#include "compiler/toolchain.h"
#include "core/shape.h"
#include "ember/autograd.h"
#include "ember/ember.h"

namespace ember {
namespace {

using test::CacheDir;
using test::has;
using test::spy_opts;

class LayerNormBackwardTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(compiler::compiler_available()); }
  CacheDir dir{test::kSharedCompilerCache};
};

// The grads of x, w and b for loss = sum(layer_norm(x) * r1) (+ sum(x * r2): dx then adds to
// r2, as a residual stream's grad does), eager and compiled.
struct Grads {
  Tensor x, w, b;
};
Grads grads(bool compiled, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& r1,
            const Tensor& r2, bool affine_grads) {
  const int64_t C = x.size(-1);
  auto loss = [&](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
    Tensor l = (layer_norm(xi, {C}, wi, bi) * r1).sum();
    return r2.defined() ? l + (xi * r2).sum() : l;
  };
  Tensor xl = x.detach().clone().requires_grad_(true);
  Tensor wl = w.detach().clone().requires_grad_(affine_grads);
  Tensor bl = b.detach().clone().requires_grad_(affine_grads);
  if (compiled)
    compile(loss, spy_opts())(xl, wl, bl).backward();
  else
    loss(xl, wl, bl).backward();
  return {xl.grad(), affine_grads ? wl.grad() : Tensor(), affine_grads ? bl.grad() : Tensor()};
}

TEST_F(LayerNormBackwardTest, GradsMatchEagerWithAndWithoutTheResidualAndAffineGrads) {
  struct Case {
    Shape shape;
    bool residual, affine;
  };
  // 3 x 5 rows: one thread; 40 x 33 rows: threads with partial blocks of 32.
  for (const Case& c :
       {Case{{3, 5, 16}, true, true}, Case{{40, 33, 48}, true, true},
        Case{{40, 33, 48}, false, true}, Case{{7, 64}, true, false}, Case{{7, 64}, false, false}}) {
    const int64_t C = c.shape.back();
    Tensor x = randn(c.shape) * 3.0 + 1.0, w = randn({C}), b = randn({C});
    Tensor r1 = randn(c.shape), r2 = c.residual ? randn(c.shape) : Tensor();
    Grads e = grads(false, x, w, b, r1, r2, c.affine);
    Grads k = grads(true, x, w, b, r1, r2, c.affine);
    const std::string what =
        shape_str(c.shape) + (c.residual ? " residual" : "") + (c.affine ? " affine" : "");
    EXPECT_TRUE(test::close(k.x, e.x, 1e-4, 1e-5)) << what;
    if (c.affine) {
      EXPECT_TRUE(test::close(k.w, e.w, 1e-4, 1e-4)) << what;
      EXPECT_TRUE(test::close(k.b, e.b, 1e-4, 1e-4)) << what;
    }
    EXPECT_TRUE(has(test::all_sources(), "layer_norm backward over")) << what;
    EXPECT_EQ(has(test::all_sources(), "dr[j] = rr[j] + d;"), c.residual) << what;
  }
}

TEST_F(LayerNormBackwardTest, Float32ColumnSumsStayCloseToFloat64) {
  // 8192 rows: the weight and bias grads sum 8192 terms per column. Against the float64 eager
  // grads of the same inputs, the blocked sums keep the error near a pairwise sum's.
  const Shape s{8192, 64};
  Tensor x = randn(s), w = randn({64}), b = randn({64}), r1 = randn(s);
  Grads k = grads(true, x, w, b, r1, Tensor(), true);
  auto f64 = [](const Tensor& t) { return t.to(DType::Float64); };
  Grads ref = grads(false, f64(x), f64(w), f64(b), f64(r1), Tensor(), true);
  // Each term is within a few float roundings of its float64 value; the sum of 8192 of them,
  // of size ~1, is within 1e-3 absolute of the exact one when summed in blocks.
  EXPECT_TRUE(test::close(k.w, ref.w, 0, 1e-3));
  EXPECT_TRUE(test::close(k.b, ref.b, 0, 1e-3));
  EXPECT_TRUE(test::close(k.x, ref.x, 1e-4, 1e-5));
  EXPECT_TRUE(has(test::all_sources(), "layer_norm backward over 8192 rows of 64"));
}

TEST_F(LayerNormBackwardTest, Float64GradsMatchEagerClosely) {
  const Shape s{6, 10, 24};
  TensorOptions o(DType::Float64);
  Tensor x = randn(s, o), w = randn({24}, o), b = randn({24}, o);
  Tensor r1 = randn(s, o), r2 = randn(s, o);
  Grads e = grads(false, x, w, b, r1, r2, true);
  Grads k = grads(true, x, w, b, r1, r2, true);
  EXPECT_TRUE(test::close(k.x, e.x, 1e-11, 1e-13));
  EXPECT_TRUE(test::close(k.w, e.w, 1e-11, 1e-12));
  EXPECT_TRUE(test::close(k.b, e.b, 1e-11, 1e-12));
  EXPECT_TRUE(has(test::all_sources(), "layer_norm backward over 60 rows of 24"));
}

}  // namespace
}  // namespace ember
