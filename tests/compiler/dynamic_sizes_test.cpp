// A program called at many sizes: its graphs are traced per size (C++ around the ops may
// branch on sizes unseen), but once a size guard has missed, graphs of one form share kernels
// over symbolic sizes (compiler/families.h), so the C++ compiler runs for the first size and
// for the fit, not for every size, and every result matches eager.
#include <gtest/gtest.h>

#include "compiler/compiler_test_util.h"
#include "compiler/families.h"
#include "compiler/toolchain.h"
#include "ember/compile.h"
#include "ember/ember.h"

namespace ember::test {
namespace {

Tensor scaled_softmax(const Tensor& x, const Tensor& b) { return (x * 2.0 + b).softmax(-1); }

TEST(DynamicSizes, RowLengthsFromTwoTo40BuildTwoLibraries) {
  CacheDir cache(kSharedCompilerCache);
  forget_shared_code();
  auto f = compile(scaled_softmax, compiler_opts());
  const compiler::ToolchainStats before = compiler::toolchain_stats();
  for (int64_t t = 2; t <= 40; ++t) {
    manual_seed(uint64_t(t));
    const Tensor x = randn({4, t}), b = randn({t});
    EXPECT_TRUE(close(f(x, b), scaled_softmax(x, b), 1e-5, 1e-6)) << "row length " << t;
  }
  // t = 2 specialized; at t = 3 its size guard misses, and the two graphs fit kernels over
  // the row length: one library, which every later size reuses.
  EXPECT_LE(new_libraries(before), 2);
  EXPECT_EQ(f.stats().eager_fallbacks, 0);  // 39 sizes, past the recompile limit of 8
  EXPECT_EQ(f.stats().traces, 39);          // each size traced: its guards are its own
  EXPECT_GE(f.stats().shared_compiles, 36);  // graphs served by the library over the symbol
}

TEST(DynamicSizes, PointwiseKernelsAreSharedToo) {
  CacheDir cache(kSharedCompilerCache);
  forget_shared_code();
  auto f = compile([](const Tensor& x, const Tensor& b) { return (x * 2.0 + b).relu(); },
                   compiler_opts());
  const compiler::ToolchainStats before = compiler::toolchain_stats();
  for (int64_t t : {20, 21, 22, 40, 100, 1000}) {
    const Tensor x = randn({3, t}), b = randn({t});
    EXPECT_TRUE(close(f(x, b), (x * 2.0 + b).relu(), 0, 0)) << t;
  }
  EXPECT_LE(new_libraries(before), 2);
}

TEST(DynamicSizes, RowCountsAndStridedInputsShareOneLibraryToo) {
  CacheDir cache(kSharedCompilerCache);
  forget_shared_code();
  // Rows vary; the input is a transposed view, so its strides follow the size too.
  auto g = compile(
      [](const Tensor& xt, const Tensor& w) {
        return layer_norm(xt.transpose(0, 1) + 1.0, {xt.size(0)}, w).relu();
      },
      compiler_opts());
  const compiler::ToolchainStats before = compiler::toolchain_stats();
  const Tensor w = randn({32});
  for (int64_t rows : {5, 6, 9, 17, 64, 3}) {
    manual_seed(uint64_t(rows));
    const Tensor xt = randn({32, rows});
    const Tensor want = layer_norm(xt.transpose(0, 1) + 1.0, {32}, w).relu();
    EXPECT_TRUE(close(g(xt, w), want, 1e-4, 1e-5)) << rows << " rows";
  }
  EXPECT_LE(new_libraries(before), 2);
}

TEST(DynamicSizes, DynamicFalseKeepsEverySizeSpecialized) {
  CacheDir cache(kSharedCompilerCache);
  forget_shared_code();
  CompileOptions o = compiler_opts();
  o.dynamic = false;
  auto f = compile(scaled_softmax, o);
  const compiler::ToolchainStats before = compiler::toolchain_stats();
  for (int64_t t : {5, 6, 7}) {
    const Tensor x = randn({4, t}), b = randn({t});
    EXPECT_TRUE(close(f(x, b), scaled_softmax(x, b), 1e-5, 1e-6));
  }
  EXPECT_EQ(new_libraries(before), 3);
}

TEST(DynamicSizes, MarkStaticKeepsThatDimSpecialized) {
  CacheDir cache(kSharedCompilerCache);
  forget_shared_code();
  auto f = compile(scaled_softmax, compiler_opts());
  const compiler::ToolchainStats before = compiler::toolchain_stats();
  for (int64_t t : {5, 6, 7}) {
    const Tensor x = randn({4, t}), b = randn({t});
    mark_static(x, -1);
    EXPECT_TRUE(close(f(x, b), scaled_softmax(x, b), 1e-5, 1e-6));
  }
  // Misses on a dim marked static recompile for the size and leave the callable static.
  EXPECT_EQ(new_libraries(before), 3);
  EXPECT_EQ(f.stats().shared_compiles, 0);
  EXPECT_EQ(f.stats().deferred_compiles, 0);
}

TEST(DynamicSizes, MarkStaticKeepsADimOutOfTheSymbols) {
  CacheDir cache(kSharedCompilerCache);
  forget_shared_code();
  CompileOptions o = compiler_opts();
  o.dynamic = true;
  auto f = compile(scaled_softmax, o);
  const compiler::ToolchainStats before = compiler::toolchain_stats();
  // Rows vary freely; the row length, in both inputs, is marked static.
  for (int64_t t : {5, 6, 7}) {
    for (int64_t rows : {3, 4, 8}) {
      const Tensor x = randn({rows, t}), b = randn({t});
      mark_static(x, -1);
      mark_static(b, 0);
      EXPECT_TRUE(close(f(x, b), scaled_softmax(x, b), 1e-5, 1e-6));
    }
  }
  // Each length fits kernels over the rows from its own graphs (the length a constant in
  // them): at the first, the first rows count ran interpreted (the first of its form) and
  // the others share; at a later length the first rows count is built on its own (the family
  // had samples), and the next two fit and share. Five libraries, no kernel over the length.
  EXPECT_EQ(f.stats().deferred_compiles, 1);
  EXPECT_EQ(f.stats().shared_compiles, 6);
  EXPECT_EQ(new_libraries(before), 5);
}

TEST(DynamicSizes, MarksCheckTheirDim) {
  const Tensor x = randn({4, 3});
  EXPECT_THROW(mark_dynamic(x, 2), Error);
  EXPECT_THROW(mark_static(x, -3), Error);
  EXPECT_THROW(mark_dynamic(Tensor(), 0), Error);
  mark_dynamic(x, -1);
  EXPECT_EQ(x.impl()->dynamic_dims, 2u);
  mark_static(x, 1);  // the later mark wins
  EXPECT_EQ(x.impl()->dynamic_dims, 0u);
  EXPECT_EQ(x.impl()->static_dims, 2u);
}

}  // namespace
}  // namespace ember::test
