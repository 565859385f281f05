// CompileOptions::mode: only "default" and "reduce-overhead" are taken; on the CPU,
// "reduce-overhead" runs as "default" (CUDA graphs are a GPU matter) and records nothing.
#include <gtest/gtest.h>

#include "compiler/compiler_test_util.h"
#include "ember/compile.h"
#include "ember/ember.h"

namespace ember::test {
namespace {

TEST(CompileMode, AnUnknownModeIsRefusedWithTheModesThereAre) {
  CompileOptions o;
  o.mode = "max-autotune";
  try {
    auto f = compile([](const Tensor& x) { return x + 1.0; }, o);
    FAIL() << "an unknown mode was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown mode \"max-autotune\""), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("reduce-overhead"), std::string::npos) << e.what();
  }
}

TEST(CompileMode, ReduceOverheadOnTheCpuRunsAsDefaultAndRecordsNothing) {
  CacheDir dir{kSharedCompilerCache};
  CompileOptions o = compiler_opts();
  o.mode = "reduce-overhead";
  auto fn = [](const Tensor& a, const Tensor& b) { return (a * b + 1.0).relu().sum({1}); };
  auto f = compile(fn, o);
  const CudaGraphCounters c0 = cuda_graph_counters();
  for (int i = 0; i < 3; ++i) {
    const Tensor a = randn({5, 7}), b = randn({5, 7});
    EXPECT_LE((f(a, b) - fn(a, b)).abs().amax().item(), 1e-5) << "call " << i;
  }
  const CudaGraphCounters c1 = cuda_graph_counters();
  EXPECT_EQ(c1.recordings, c0.recordings);
  EXPECT_EQ(c1.replays, c0.replays);
  EXPECT_EQ(f.stats().replays, 2);
}

}  // namespace
}  // namespace ember::test
