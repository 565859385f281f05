// Generated code that once did not build or silently computed the wrong thing, compiled against
// eager on random data: the forward result, and for training graphs the grads of every input.
// Each case names the planning mistake it pinned down (docs/architecture.md, "Compiler").
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "compiler/codegen_util.h"
#include "compiler/compiler_test_util.h"
#include "compiler/toolchain.h"
#include "core/shape.h"
#include "ember/autograd.h"
#include "ember/ember.h"
#include "support/expect_error.h"

namespace ember {
namespace {

using test::CacheDir;
using test::compiler_opts;

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

class SoundnessCodegenTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(compiler::compiler_available()); }
  CacheDir dir{test::kSharedCompilerCache};
};

// Float32 results summed in another order than eager (row kernels, OpenBLAS): within rtol 1e-4,
// atol 1e-5.
::testing::AssertionResult close(const Tensor& a, const Tensor& b) {
  return test::close(a, b, 1e-4, 1e-5);
}

// fn over `xs`, compiled and eager (no grad), twice: the trace and the replay.
void expect_forward(const Fn& fn, const std::vector<Tensor>& xs) {
  NoGradGuard no_grad;
  const Tensor want = fn(xs);
  auto f = compile([&](const std::vector<Tensor>& v) { return std::vector<Tensor>{fn(v)}; },
                   compiler_opts());
  for (int call = 0; call < 2; ++call) EXPECT_TRUE(close(f(xs)[0], want)) << "call " << call;
}

// The grads of the scalar loss(xs) w.r.t. every x, compiled (the training form: forward and
// backward graphs) and eager; also the loss itself.
void expect_grads(const Fn& loss, const std::vector<Tensor>& xs) {
  auto leaves = [&] {
    std::vector<Tensor> v;
    for (const Tensor& x : xs) v.push_back(x.detach().clone().requires_grad_(true));
    return v;
  };
  std::vector<Tensor> e = leaves();
  Tensor le = loss(e);
  le.backward();
  auto f = compile([&](const std::vector<Tensor>& v) { return std::vector<Tensor>{loss(v)}; },
                   compiler_opts());
  for (int call = 0; call < 2; ++call) {
    std::vector<Tensor> c = leaves();
    Tensor lc = f(c)[0];
    EXPECT_TRUE(close(lc.detach(), le.detach())) << "loss, call " << call;
    lc.backward();
    for (size_t i = 0; i < xs.size(); ++i)
      EXPECT_TRUE(close(c[i].grad(), e[i].grad())) << "grad of input " << i << ", call " << call;
  }
}

// --- Kernels that read a value they never declared -------------------------------------------

// Generated code is checked before it is built: a kernel that reads a value it neither loads nor
// computes fails at generation, naming the kernel and the value, not in the C++ compiler.
TEST_F(SoundnessCodegenTest, AnUndeclaredReadFailsAtGeneration) {
  const std::string ok =
      "extern \"C\" void kernel_0(void* const* args) {  // v9 in a comment\n"
      "  const float* __restrict in0 = static_cast<const float*>(args[0]);\n"
      "  const float v1 = in0[0];\n"
      "#pragma omp simd\n"
      "  for (int64_t i = 0; i < 4; ++i) {\n"
      "    const float v2 = ember::fn::Mul{}(v1, 2.5e-1f);\n"
      "    out[i] = v2;\n"
      "  }\n"
      "}\n";
  EXPECT_NO_THROW(compiler::check_reads_declared(ok, "kernel_0"));
  // Never declared (a product the kernel does not compute).
  test::expect_error(
      [&] {
        compiler::check_reads_declared(compiler::replace_all(ok, "Mul{}(v1", "Mul{}(v3"),
                                       "kernel_0");
      },
      {"kernel_0 reads v3"});
  // Declared in another scope only.
  test::expect_error(
      [&] {
        compiler::check_reads_declared(
            compiler::replace_all(ok, "out[i] = v2;\n  }", "  }\n  out[0] = v2;"), "kernel_7");
      },
      {"kernel_7 reads v2"});
}

// slice_backward's grad was computed inside the kernel (the narrow covers its whole dim, so the
// producer has the output's shape and was fused) but read as an argument at a shifted column.
TEST_F(SoundnessCodegenTest, WholeDimNarrowBackward) {
  expect_grads([](const std::vector<Tensor>& v) { return (v[0].narrow(0, 0, 5) * 2.0).sum(); },
               {randn({5})});
  expect_grads([](const std::vector<Tensor>& v) { return (v[0].narrow(1, 0, 7) * v[1]).sum(); },
               {randn({3, 7}), randn({3, 7})});
  // The grad read both through the slice and directly.
  expect_grads(
      [](const std::vector<Tensor>& v) { return (v[0].narrow(1, 0, 6).exp() + v[0] * v[0]).sum(); },
      {randn({4, 6})});
}

// A consumer took a row group and a matmul's product both: the row kernel never loads the
// product, which the gemm group form would have written into its output.
TEST_F(SoundnessCodegenTest, RowReductionPlusMatmul) {
  expect_forward(
      [](const std::vector<Tensor>& v) { return v[0].sum({1}, true) + matmul(v[1], v[2]); },
      {randn({4, 6}), randn({4, 5}), randn({5, 6})});
  expect_forward(  // the product first
      [](const std::vector<Tensor>& v) { return matmul(v[1], v[2]) + v[0].sum({1}, true); },
      {randn({4, 6}), randn({4, 5}), randn({5, 6})});
  expect_forward(
      [](const std::vector<Tensor>& v) { return v[0].mean({1}, true) * matmul(v[1], v[2]); },
      {randn({4, 6}), randn({4, 5}), randn({5, 6})});
}

TEST_F(SoundnessCodegenTest, LayerNormPlusMatmul) {
  expect_forward(
      [](const std::vector<Tensor>& v) { return layer_norm(v[0], {2}) + matmul(v[1], v[2]); },
      {randn({3, 2}), randn({3, 4}), randn({4, 2})});
  expect_forward(
      [](const std::vector<Tensor>& v) { return matmul(v[1], v[2]) - layer_norm(v[0], {8}); },
      {randn({5, 8}), randn({5, 3}), randn({3, 8})});
}

TEST_F(SoundnessCodegenTest, SoftmaxPlusMatmul) {
  expect_forward([](const std::vector<Tensor>& v) { return v[0].softmax(1) + matmul(v[1], v[2]); },
                 {randn({4, 6}), randn({4, 5}), randn({5, 6})});
  expect_forward(  // batched product
      [](const std::vector<Tensor>& v) { return v[0].softmax(2) + matmul(v[1], v[2]); },
      {randn({2, 4, 6}), randn({2, 4, 5}), randn({2, 5, 6})});
}

// The backward adds layer_norm's input grad to a product's.
TEST_F(SoundnessCodegenTest, LayerNormMatmulBackward) {
  expect_grads(
      [](const std::vector<Tensor>& v) { return matmul(layer_norm(v[0], {2}), v[0].t()).sum(); },
      {randn({3, 2})});
  expect_grads(
      [](const std::vector<Tensor>& v) {
        return (matmul(layer_norm(v[0], {8}), v[0].t()).softmax(1) * v[1]).sum();
      },
      {randn({5, 8}), randn({5, 5})});
}

// softmax(q k^T) @ v + r: the add took the last product as its gemm, and the attention group
// took the same product as its softmax @ v, keeping the probabilities to itself; the gemm then
// ran on probabilities nobody wrote. Found by the random programs (seed 2552 of 0627f4a's
// generator with the attention pattern).
TEST_F(SoundnessCodegenTest, AttentionResultPlusResidual) {
  using V = const std::vector<Tensor>&;
  expect_forward(
      [](V v) {
        return matmul((matmul(v[0], v[0].transpose(1, 2)) * 0.5).softmax(2), v[0]) + v[0];
      },
      {randn({2, 3, 4})});
  expect_forward(
      [](V v) {
        Tensor q = v[0].unsqueeze(1);
        return (matmul(matmul(q, q.transpose(1, 2)).softmax(2), q) + q).abs();
      },
      {randn({2, 2})});
  expect_grads(
      [](V v) {
        Tensor p = (matmul(v[0], v[1].transpose(1, 2)) * 0.25).softmax(2);
        return ((matmul(p, v[2]) + v[0]) * v[3]).sum();
      },
      {randn({2, 16, 16}), randn({2, 16, 16}), randn({2, 16, 16}), randn({2, 16, 16})});
}

// --- Reductions broadcast against their input ------------------------------------------------

// A row reduction without keepdim broadcasts along the LAST dim of its consumer: x - x.sum(1) is
// x[i][j] - s[j], not x[i][j] - s[i] (which a row kernel computes).
TEST_F(SoundnessCodegenTest, ReductionBroadcastAlongTheLastDim) {
  using V = const std::vector<Tensor>&;
  const std::vector<Fn> fns = {
      [](V v) { return v[0] - v[0].sum({1}); },
      [](V v) { return v[0] - v[0].mean({1}); },
      [](V v) { return v[0].sum({1}) - v[0]; },
      [](V v) { return v[0].mean({1}) * v[0]; },
      [](V v) { return v[0] - v[0].amax({1}); },
      [](V v) { return v[0] - v[0].sum({0}); },
      [](V v) { return v[0] - v[0].mean({0}, true); },
      [](V v) { return v[0] - v[0].sum({1}, true); },
      [](V v) { return v[0] - v[0].amax({1}, true); },
      [](V v) { return (v[0] - v[0].sum({1})).exp(); },
  };
  for (const Shape& s : {Shape{2, 2}, Shape{3, 3}, Shape{5, 5}})
    for (size_t k = 0; k < fns.size(); ++k) {
      SCOPED_TRACE("shape " + shape_str(s) + ", case " + std::to_string(k));
      expect_forward(fns[k], {randn(s)});
    }
}

TEST_F(SoundnessCodegenTest, ReductionBroadcastInThreeDims) {
  using V = const std::vector<Tensor>&;
  const std::vector<Fn> fns = {
      [](V v) { return v[0] - v[0].sum({2}); },  // [a, b] against [.., a, b]
      [](V v) { return v[0].mean({2}) - v[0]; },
      [](V v) { return v[0] - v[0].amax({2}); },
      [](V v) { return v[0] - v[0].sum({1}); },
      [](V v) { return v[0] - v[0].sum({0}); },
      [](V v) { return v[0] - v[0].sum({2}, true); },  // the one form a row kernel may fuse
      [](V v) { return v[0] * v[0].mean({1}, true); },
      [](V v) { return v[0].softmax(2) - v[0].sum({2}); },
  };
  for (const Shape& s : {Shape{3, 3, 3}, Shape{2, 3, 3}, Shape{4, 2, 2}})
    for (size_t k = 0; k < fns.size(); ++k) {
      SCOPED_TRACE("shape " + shape_str(s) + ", case " + std::to_string(k));
      try {
        fns[k]({zeros(s)});  // shapes that do not broadcast are skipped
      } catch (const Error&) {
        continue;
      }
      expect_forward(fns[k], {randn(s)});
    }
  // A reduction of a [rows, 1] value is one per row either way.
  expect_forward([](V v) { return v[0] - v[0].sum({1}); }, {randn({4, 1})});
}

// Under backward: the training forward computes the broadcast (when the sums are not saved for
// the backward), and the grad of a broadcast reduction sums over the dim it was broadcast along.
TEST_F(SoundnessCodegenTest, ReductionBroadcastBackward) {
  expect_grads([](const std::vector<Tensor>& v) { return (v[0] - v[0].sum({1})).exp().sum(); },
               {randn({3, 3})});
  expect_grads([](const std::vector<Tensor>& v) { return ((v[0].mean({2}) - v[0]) * v[1]).sum(); },
               {randn({4, 4, 4}), randn({4, 4, 4})});
  expect_grads([](const std::vector<Tensor>& v) { return ((v[0] - v[0].sum({1})) * v[1]).sum(); },
               {randn({3, 3}), randn({3, 3})});
  expect_grads(
      [](const std::vector<Tensor>& v) { return ((v[0] - v[0].mean({1}, true)).exp()).sum(); },
      {randn({4, 6})});
}

}  // namespace
}  // namespace ember
