// The "compiler" backend's row kernels: softmax and layer_norm over the last dim, with fused
// pointwise producers and consumers, against the eager kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "capture/capture_test_util.h"
#include "compiler/compiler_test_util.h"
#include "compiler/compiled_graph.h"
#include "compiler/toolchain.h"
#include "core/shape.h"
#include "dispatch/dispatcher.h"
#include "ember/autograd.h"

namespace ember {
namespace {

using test::CacheDir;
using test::compiler_opts;
using test::count;
using test::last_source;
using test::spy_opts;

using graph::Graph;
using graph::InputKind;
using graph::Value;

// Tolerances: the kernels reduce in a different order from eager (OpenMP simd lanes against
// eager's chunk tree), so results agree to rounding. float32: rtol 1e-5 (atol 1e-6 for values
// near zero); float64: rtol 1e-12, atol 1e-14.
constexpr double kRtol32 = 1e-5, kAtol32 = 1e-6, kRtol64 = 1e-12, kAtol64 = 1e-14;

::testing::AssertionResult allclose(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << "metadata differs: " << a.shape_str() << " vs "
                                         << b.shape_str();
  const bool f64 = a.dtype() == DType::Float64;
  const double rtol = f64 ? kRtol64 : kRtol32, atol = f64 ? kAtol64 : kAtol32;
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(std::abs(x[i] - y[i]) <= atol + rtol * std::abs(y[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " vs " << y[i];
  return ::testing::AssertionSuccess();
}

using test::compile_graph;

class RowwiseTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(compiler::compiler_available()); }
  CacheDir dir{test::kSharedCompilerCache};
  NoGradGuard no_grad;
};

// Odd row lengths: a single column, a short row (not a multiple of the SIMD width), a long one,
// and one of whole 256-byte blocks (reduced in blocks, one accumulator per lane).
const std::vector<Shape> kShapes = {{3, 1}, {5, 7}, {4, 1000}, {6, 512}};

TEST_F(RowwiseTest, SoftmaxMatchesEager) {
  auto fn = [](const Tensor& x) { return x.softmax(-1); };
  auto f = compile(fn, compiler_opts());
  for (const Shape& s : kShapes) {
    Tensor x = randn(s) * 4.0;
    EXPECT_TRUE(allclose(f(x), fn(x))) << shape_str(s);
  }
  auto f64 = compile(fn, compiler_opts());
  Tensor x = randn({5, 7}, TensorOptions(DType::Float64));
  EXPECT_TRUE(allclose(f64(x), fn(x)));
}

TEST_F(RowwiseTest, LogSoftmaxMatchesEager) {
  // Alone, and with a producer and a consumer fused (x / 2 -> log_softmax -> * -1).
  auto alone = [](const Tensor& x) { return x.log_softmax(-1); };
  auto fused = [](const Tensor& x) { return (x * 0.5).log_softmax(-1) * -1.0; };
  for (const Shape& s : kShapes) {
    Tensor x = randn(s) * 5.0;
    EXPECT_TRUE(allclose(compile(alone, compiler_opts())(x), alone(x))) << shape_str(s);
    EXPECT_TRUE(allclose(compile(fused, compiler_opts())(x), fused(x))) << shape_str(s);
  }
  Tensor x = randn({5, 7}, TensorOptions(DType::Float64)) * 30.0;  // large spread: no underflow
  EXPECT_TRUE(allclose(compile(alone, compiler_opts())(x), alone(x)));
}

TEST_F(RowwiseTest, RowReductionsFuseProducersAndBroadcastConsumers) {
  // A sum over the last dim with its producer, keepdim or not: one value per row.
  auto sum_keep = [](const Tensor& x) { return (x * 2.0).exp().sum({-1}, true); };
  auto sum_drop = [](const Tensor& x) { return (x - 1.0).sum({-1}, false); };
  // Centering with the row mean broadcast back, and softmax's backward formula: one kernel each.
  auto center = [](const Tensor& x) { return (x - x.mean({-1}, true)) * 3.0; };
  auto softmax_grad = [](const Tensor& y, const Tensor& g) {
    return y * (g - (g * y).sum({-1}, true));
  };
  for (const Shape& s : kShapes) {
    Tensor x = randn(s), g = randn(s);
    EXPECT_TRUE(allclose(compile(sum_keep, spy_opts())(x), sum_keep(x))) << shape_str(s);
    EXPECT_TRUE(allclose(compile(sum_drop, spy_opts())(x), sum_drop(x))) << shape_str(s);
    EXPECT_TRUE(allclose(compile(center, spy_opts())(x), center(x))) << shape_str(s);
    EXPECT_EQ(count(last_source(), "extern \"C\""), 1) << last_source();
    Tensor y = x.softmax(-1);
    EXPECT_TRUE(allclose(compile(softmax_grad, spy_opts())(y, g), softmax_grad(y, g)))
        << shape_str(s);
    EXPECT_EQ(count(last_source(), "extern \"C\""), 1) << last_source();
  }
  // Over another dim: eager's reduction, still correct.
  auto cols = [](const Tensor& x) { return (x * 2.0).sum({0}, true) + 1.0; };
  Tensor x = randn({5, 7});
  EXPECT_TRUE(allclose(compile(cols, compiler_opts())(x), cols(x)));
}

// A column kernel's sums against float64 sums of the same inputs, within the error bound of
// its blocked summation: a column of R terms is summed in blocks of at most 32, then the blocks
// are added up, so |error| <= (32 + R / 32) eps sum|x| (eps of the dtype; means divide both
// sides by R). Eager sums in another order: the two differ by up to both errors.
::testing::AssertionResult within_sum_bound(const Tensor& got, const Tensor& x,
                                            const std::vector<int64_t>& dims, bool keep,
                                            bool mean) {
  const int64_t R = x.numel() / x.sizes().back();
  const double eps = x.dtype() == DType::Float64 ? 0x1p-53 : 0x1p-24;
  Tensor x64 = x.to(DType::Float64);
  std::vector<double> ref = (mean ? x64.mean(dims, keep) : x64.sum(dims, keep)).to_vector<double>();
  std::vector<double> mag = x64.abs().sum(dims, keep).to_vector<double>();
  std::vector<double> g = got.to_vector<double>();
  if (g.size() != ref.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < g.size(); ++i) {
    const double bound = (32.0 + double(R) / 32.0) * eps * mag[i] / (mean ? double(R) : 1.0);
    if (!(std::abs(g[i] - ref[i]) <= bound))
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << ref[i]
                                           << " (bound " << bound << ")";
  }
  return ::testing::AssertionSuccess();
}

TEST_F(RowwiseTest, ColumnSumsAndMeansMatchEager) {
  // Over every dim but the last (a bias grad): a column kernel. Odd row counts, column counts
  // off the 64-column block, keepdim or not; a sum over other dims stays eager.
  for (DType t : {DType::Float32, DType::Float64}) {
    for (const Shape& s : std::vector<Shape>{{3, 5, 70}, {7, 130}, {1, 1}, {300, 64}}) {
      std::vector<int64_t> lead;
      for (size_t d = 0; d + 1 < s.size(); ++d) lead.push_back(int64_t(d));
      for (bool keep : {false, true}) {
        auto sums = [&](const Tensor& x) { return std::make_pair(x.sum(lead, keep), x.mean(lead, keep)); };
        Tensor x = randn(s, TensorOptions(t));
        auto [a, m] = compile(sums, spy_opts())(x);
        const std::string what = std::string(dtype_name(t)) + " " + shape_str(s) + " keepdim " +
                                 std::to_string(keep);
        EXPECT_EQ(a.sizes(), x.sum(lead, keep).sizes()) << what;
        EXPECT_TRUE(within_sum_bound(a, x, lead, keep, false)) << what;
        EXPECT_TRUE(within_sum_bound(m, x, lead, keep, true)) << what;
        EXPECT_EQ(count(last_source(), ": column sums of"), 1);
        EXPECT_EQ(count(last_source(), ": column means of"), 1);
      }
    }
  }
  auto other = [](const Tensor& x) { return x.sum({0}); };
  Tensor x = randn({4, 5, 6});
  EXPECT_TRUE(allclose(compile(other, spy_opts())(x), other(x)));
  EXPECT_EQ(count(last_source(), "column"), 0);
}

TEST_F(RowwiseTest, LayerNormWithAndWithoutAffineMatchesEager) {
  for (const Shape& s : kShapes) {
    const int64_t n = s.back();
    Tensor x = randn(s) * 3.0 + 1.0, w = randn({n}), b = randn({n});
    auto plain = [n](const Tensor& t) { return layer_norm(t, {n}, Tensor(), Tensor(), 1e-5); };
    auto weighted = [n](const Tensor& t, const Tensor& wt) { return layer_norm(t, {n}, wt); };
    auto affine = [n](const Tensor& t, const Tensor& wt, const Tensor& bt) {
      return layer_norm(t, {n}, wt, bt);
    };
    EXPECT_TRUE(allclose(compile(plain, compiler_opts())(x), plain(x))) << shape_str(s);
    EXPECT_TRUE(allclose(compile(weighted, compiler_opts())(x, w), weighted(x, w)))
        << shape_str(s);
    EXPECT_TRUE(allclose(compile(affine, compiler_opts())(x, w, b), affine(x, w, b)))
        << shape_str(s);
  }
}

TEST_F(RowwiseTest, FusedProducerAndConsumerMatchEager) {
  auto sm = [](const Tensor& x) { return ((x * 2.0 + 1.0).softmax(-1) * 3.0).relu(); };
  auto ln = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return layer_norm(x.sigmoid() - 0.5, {x.sizes().back()}, w, b).tanh() + x;
  };
  auto fsm = compile(sm, compiler_opts());
  auto fln = compile(ln, compiler_opts());
  for (const Shape& s : kShapes) {
    Tensor x = randn(s), w = randn({s.back()}), b = randn({s.back()});
    EXPECT_TRUE(allclose(fsm(x), sm(x))) << shape_str(s);
    EXPECT_TRUE(allclose(fln(x, w, b), ln(x, w, b))) << shape_str(s);
  }
  // A strided (transposed) input is read through index arithmetic.
  Tensor xt = randn({7, 5}).t();
  EXPECT_TRUE(allclose(fsm(xt), sm(xt)));
}

// Outputs of 16 MiB and more: each row is built in the thread's buffer and streamed out a block
// at a time, and input rows are fetched ahead when rows are at most 16 KiB. Covers rows read
// straight from the input (pipelined: f32 rows of 4096, f64 rows of 1024; the next row
// prefetched by the last pass: f32 rows of 128, too short for blocked reductions; neither: f32
// rows of 8192) and rows computed by fused producers.
TEST_F(RowwiseTest, LargeOutputsStreamedRowByRowMatchEager) {
  auto sm = [](const Tensor& x) { return x.softmax(-1); };
  auto f = compile(sm, test::spy_opts());
  Tensor x = randn({1024, 4096}) * 4.0;
  EXPECT_TRUE(allclose(f(x), sm(x)));
  EXPECT_TRUE(test::has(test::last_source(), "ember_stream(out + r * n + jb"));
  EXPECT_TRUE(test::has(test::last_source(), "__builtin_prefetch(next0 + jb"));
  Tensor narrow = randn({32768, 128}) * 4.0;
  EXPECT_TRUE(allclose(f(narrow), sm(narrow)));
  EXPECT_TRUE(test::has(test::last_source(), "__builtin_prefetch(next + jb"));

  auto fused = [](const Tensor& t) { return ((t * 2.0 + 1.0).softmax(-1) * 3.0).relu(); };
  EXPECT_TRUE(allclose(compile(fused, compiler_opts())(x), fused(x)));

  Tensor wide = randn({512, 8192}) * 3.0 + 1.0, w = randn({8192}), b = randn({8192});
  auto ln = [](const Tensor& t, const Tensor& wt, const Tensor& bt) {
    return layer_norm(t, {t.sizes().back()}, wt, bt);
  };
  EXPECT_TRUE(allclose(compile(ln, compiler_opts())(wide, w, b), ln(wide, w, b)));

  Tensor x64 = randn({2048, 1024}, TensorOptions(DType::Float64)) * 30.0;
  auto lsm = [](const Tensor& t) { return t.log_softmax(-1); };
  EXPECT_TRUE(allclose(compile(lsm, compiler_opts())(x64), lsm(x64)));
  auto ln64 = [](const Tensor& t) { return layer_norm(t, {t.sizes().back()}); };
  EXPECT_TRUE(allclose(compile(ln64, compiler_opts())(x64), ln64(x64)));
}

// Pipelined row kernels (large outputs, rows read straight from the input, at most 16 KiB):
// each thread's rows run as a pipeline in which row r's last reduction also stores row r - 1's
// output and the last row is stored after the loop. Covers a row count that does not split
// evenly over threads, a consumer reading another input at the row's own offset (row r - 1's
// bases), softmax's kept row (the other half of the row buffer), log_softmax's output reading
// the input and the max, layer_norm with its weight and bias, and rows computed by producers.
TEST_F(RowwiseTest, PipelinedRowKernelsMatchEager) {
  Tensor x = randn({1031, 4096}) * 4.0, y = randn({1031, 4096}), c = randn({1031, 1});
  auto sm = [](const Tensor& t, const Tensor& u, const Tensor& v) { return t.softmax(-1) * u + v; };
  EXPECT_TRUE(allclose(compile(sm, test::spy_opts())(x, y, c), sm(x, y, c)));
  EXPECT_TRUE(test::has(test::last_source(), "if (rp >= r0)"));
  EXPECT_TRUE(test::has(test::last_source(), "rowbuf[r & 1]"));

  auto lsm = [](const Tensor& t) { return t.log_softmax(-1); };
  EXPECT_TRUE(allclose(compile(lsm, compiler_opts())(x), lsm(x)));

  Tensor w = randn({4096}), b = randn({4096});
  auto ln = [](const Tensor& t, const Tensor& wt, const Tensor& bt) {
    return layer_norm(t, {t.sizes().back()}, wt, bt);
  };
  EXPECT_TRUE(allclose(compile(ln, compiler_opts())(x, w, b), ln(x, w, b)));

  // Fused producers: the rows of the inputs they read along the row are fetched ahead (here
  // one of 8 KiB a row, and one broadcast over the middle dim, whose row offset is a division
  // of the row index); a row vector is read where it lies.
  Tensor p = randn({8, 260, 2048}), q = randn({8, 1, 2048}), v = randn({2048});
  auto prod = [](const Tensor& t, const Tensor& u, const Tensor& vt) {
    return (t * u + vt).log_softmax(-1);
  };
  EXPECT_TRUE(allclose(compile(prod, test::spy_opts())(p, q, v), prod(p, q, v)));
  EXPECT_TRUE(test::has(test::last_source(), "if (rp >= r0)"));
  EXPECT_TRUE(test::has(test::last_source(), "2048*(rn/260)"));
}

// x * 2 + 1 -> softmax -> * 3 over f32[5, 7], built directly: full() nodes for the constants.
std::shared_ptr<Graph> producer_softmax_consumer_graph() {
  auto g = std::make_shared<Graph>();
  TensorMeta m;
  m.sizes = {5, 7};
  Value* x = g->add_input(m, kCPU, InputKind::Argument, "x");
  Attrs c1, c2, c3, sm;
  c1.value = 2;
  c2.value = 1;
  c3.value = 3;
  c1.dtype = c2.dtype = c3.dtype = DType::Float32;
  sm.dim = 1;
  Value* k1 = g->add_node(OpId::full, {}, c1, {})->outputs[0];
  Value* a = g->add_node(OpId::mul, {x, k1}, {}, {})->outputs[0];
  Value* k2 = g->add_node(OpId::full, {}, c2, {})->outputs[0];
  Value* b = g->add_node(OpId::add, {a, k2}, {}, {})->outputs[0];
  Value* s = g->add_node(OpId::softmax, {b}, sm, {})->outputs[0];
  Value* k3 = g->add_node(OpId::full, {}, c3, {})->outputs[0];
  Value* y = g->add_node(OpId::mul, {s, k3}, {}, {})->outputs[0];
  g->set_outputs({y});
  return g;
}

TEST_F(RowwiseTest, ProducerSoftmaxConsumerIsOneKernel) {
  auto cg = compile_graph(producer_softmax_consumer_graph());
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->kernel_count(), 1u);
  EXPECT_NE(cg->source().find("ember::fn::Exp"), std::string::npos);
  EXPECT_NE(cg->source().find("softmax"), std::string::npos);  // the comment naming the nodes
  EXPECT_NE(cg->source().find("#pragma omp simd"), std::string::npos);
  Tensor x = randn({5, 7});
  EXPECT_TRUE(allclose(cg->run({x})[0], (x * 2.0 + 1.0).softmax(1) * 3.0));
}

TEST_F(RowwiseTest, LayerNormStatisticsAreProducedWhenRead) {
  // layer_norm(x, w, b) with its mean and rstd handed out: one kernel writes all three, also
  // when the output is large enough for the pipelined, streamed kernel.
  for (int64_t rows : {5, 1031}) {
    const int64_t n = rows == 5 ? 7 : 4096;
    auto g = std::make_shared<Graph>();
    TensorMeta mx, mp;
    mx.sizes = {rows, n};
    mp.sizes = {n};
    Value* x = g->add_input(mx, kCPU, InputKind::Argument, "x");
    Value* w = g->add_input(mp, kCPU, InputKind::Argument, "w");
    Value* b = g->add_input(mp, kCPU, InputKind::Argument, "b");
    Attrs a;
    a.shape = {n};
    a.value = 1e-5;
    auto* ln = g->add_node(OpId::layer_norm, {x, w, b}, a, {});
    g->set_outputs({ln->outputs[0], ln->outputs[1], ln->outputs[2]});
    auto cg = compile_graph(g);
    ASSERT_TRUE(cg);
    EXPECT_EQ(cg->kernel_count(), 1u);
    Tensor tx = randn({rows, n}), tw = randn({n}), tb = randn({n});
    std::vector<Tensor> got = cg->run({tx, tw, tb});
    std::vector<Tensor> want = dispatch(OpId::layer_norm, {tx, tw, tb}, a);
    ASSERT_EQ(got.size(), 3u);
    for (size_t k = 0; k < 3; ++k) EXPECT_TRUE(allclose(got[k], want[k])) << "output " << k;
  }
}

TEST_F(RowwiseTest, SoftmaxOverAnotherDimStaysEager) {
  auto fn = [](const Tensor& x) { return (x + 1.0).softmax(0); };
  auto f = compile(fn, compiler_opts());
  Tensor x = randn({5, 7});
  EXPECT_TRUE(allclose(f(x), fn(x)));
}

TEST_F(RowwiseTest, TwoSoftmaxesAreTwoKernels) {
  // softmax(softmax(x) * 2): one row op per kernel.
  auto g = std::make_shared<Graph>();
  TensorMeta m;
  m.sizes = {5, 7};
  Value* x = g->add_input(m, kCPU, InputKind::Argument, "x");
  Attrs sm, two;
  sm.dim = 1;
  two.value = 2;
  two.dtype = DType::Float32;
  Value* s1 = g->add_node(OpId::softmax, {x}, sm, {})->outputs[0];
  Value* k = g->add_node(OpId::full, {}, two, {})->outputs[0];
  Value* p = g->add_node(OpId::mul, {s1, k}, {}, {})->outputs[0];
  Value* s2 = g->add_node(OpId::softmax, {p}, sm, {})->outputs[0];
  g->set_outputs({s2});
  auto cg = compile_graph(g);
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->kernel_count(), 2u);
  Tensor tx = randn({5, 7});
  EXPECT_TRUE(allclose(cg->run({tx})[0], (tx.softmax(1) * 2.0).softmax(1)));
}

}  // namespace
}  // namespace ember
