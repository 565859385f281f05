// Independent matmuls left to BLAS run side by side, one per thread (compiler/gemm_pairs.h):
// which pairs are chosen, and that results equal eager's. float32 products of a matrix go to
// ember's gemm instead, one at a time.
#include "compiler/gemm_pairs.h"

#include <gtest/gtest.h>

#include "capture/capture_test_util.h"
#include "compiler/compiler_test_util.h"
#include "compiler/step_profile.h"
#include "kernels/cpu/gemm.h"

namespace ember {
namespace {

using test::CacheDir;
using test::compiler_opts;
using test::has;

// The steps of f's compiled graph as the profile names them, after one profiled call.
template <class F, class... Args>
std::string profiled_steps(F& f, const Args&... args) {
  f(args...);  // compile first
  compiler::reset_step_profile();
  compiler::set_step_profile(true);
  f(args...);
  compiler::set_step_profile(false);
  std::string t = compiler::step_profile_table();
  compiler::reset_step_profile();
  return t;
}

TEST(GemmPairs, GradsOfInputAndWeightRunSideBySide) {
  CacheDir dir(test::kSharedCompilerCache);
  // What a linear layer's backward computes: g @ w and x^T @ g, independent of each other.
  auto fn = [](const Tensor& g, const Tensor& w, const Tensor& x) {
    return std::make_pair(g.matmul(w), x.transpose(0, 1).matmul(g));
  };
  auto f = compile(fn, compiler_opts());
  for (DType t : {DType::Float32, DType::Float64}) {
    Tensor g = randn({96, 48}, TensorOptions(t)), w = randn({48, 32}, TensorOptions(t)),
           x = randn({96, 32}, TensorOptions(t));
    const std::string steps = profiled_steps(f, g, w, x);
    auto [a, b] = f(g, w, x);
    auto [ea, eb] = fn(g, w, x);
    if (t == DType::Float32 && cpu::own_gemm_enabled()) {
      // ember's gemm takes both, one after the other, each with all threads.
      EXPECT_FALSE(has(steps, "side by side")) << steps;
      EXPECT_TRUE(has(steps, "gemm -> f32[96, 32]") && has(steps, "gemm -> f32[32, 48]")) << steps;
      EXPECT_TRUE(test::close(a, ea, 1e-5, 1e-5));
      EXPECT_TRUE(test::close(b, eb, 1e-5, 1e-5));
      continue;
    }
    EXPECT_TRUE(has(steps, "2 matmuls side by side")) << steps;
    EXPECT_TRUE(test::bits_equal(a, ea)) << dtype_name(t);
    EXPECT_TRUE(test::bits_equal(b, eb)) << dtype_name(t);
  }
}

TEST(GemmPairs, AMatmulThatReadsTheOtherWaits) {
  CacheDir dir(test::kSharedCompilerCache);
  auto fn = [](const Tensor& a, const Tensor& b) { return a.matmul(b).transpose(0, 1).matmul(a); };
  auto f = compile(fn, compiler_opts());
  Tensor a = randn({32, 32}), b = randn({32, 32});
  const std::string steps = profiled_steps(f, a, b);
  EXPECT_FALSE(has(steps, "side by side")) << steps;
  EXPECT_TRUE(has(steps, cpu::own_gemm_enabled() ? "gemm -> f32[32, 32]" : "eager matmul"))
      << steps;
  // Each runs alone, on ember's gemm where it is built in (other roundings than BLAS).
  EXPECT_TRUE(test::close(f(a, b), fn(a, b), 1e-5, 1e-5));
}

TEST(GemmPairs, OnlyFloatMatmulsPair) {
  graph::Graph g;
  auto in = [&](DType t) {
    return g.add_input(TensorMeta{{4, 4}, contiguous_strides({4, 4}), 0, t}, kCPU,
                       graph::InputKind::Argument, "x");
  };
  graph::Value* xi = in(DType::Int64);
  graph::Value* xf = in(DType::Float32);
  auto mm = [&](graph::Value* v) {
    return g.add_node(OpId::matmul, {v, v}, Attrs{}, {v->meta});
  };
  const graph::Node* a = mm(xi);
  const graph::Node* b = mm(xf);
  const graph::Node* c = mm(xf);
  EXPECT_FALSE(compiler::pairable_matmul(*a));
  EXPECT_TRUE(compiler::pairable_matmul(*b));
  // The integer matmul is skipped; the two float ones pair; a kernel step (null) stops a search.
  EXPECT_EQ(compiler::plan_gemm_pairs({a, b, c}), (std::vector<int>{-1, 2, 1}));
  EXPECT_EQ(compiler::plan_gemm_pairs({b, nullptr, c}), (std::vector<int>{-1, -1, -1}));
}

}  // namespace
}  // namespace ember
