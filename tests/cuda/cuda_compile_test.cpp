// compile() on GPU tensors: generated code is CPU-only, so a captured graph of GPU tensors runs
// through the eager interpreter (the eager CUDA kernels); results equal eager's, and dropout
// draws a fresh mask at every call (the captured graph holds its composite, not the fused op
// whose draws are attrs).
#include <gtest/gtest.h>

#include "ember/compile.h"
#include "ember/cuda.h"
#include "ember/ember.h"

namespace ember::test {
namespace {

const Device kGpu{DeviceType::CUDA, 0};

Tensor block(const Tensor& x, const Tensor& w) {
  Tensor h = (matmul(x, w) + 1.0).relu();
  return h.softmax(-1).sum({0});
}

TEST(CudaCompile, GpuGraphsRunTheirEagerKernelsAndMatchEager) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  manual_seed(2);
  const Tensor x = randn({8, 16}).to(kGpu), w = randn({16, 4}).to(kGpu);
  auto f = compile(block);
  for (int call = 0; call < 3; ++call) {
    const Tensor got = f(x, w), want = block(x, w);
    EXPECT_EQ(got.device(), kGpu);
    EXPECT_EQ(got.cpu().to_vector<float>(), want.cpu().to_vector<float>()) << "call " << call;
  }
}

TEST(CudaCompile, DropoutDrawsAFreshMaskAtEveryCall) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  auto f = compile([](const Tensor& x) { return dropout(x, 0.5, true); });
  const Tensor x = ones({4096}).to(kGpu);
  const std::vector<float> a = f(x).cpu().to_vector<float>(), b = f(x).cpu().to_vector<float>();
  EXPECT_NE(a, b);  // a frozen mask would repeat
  int kept = 0;
  for (float v : a) kept += v != 0;
  EXPECT_GT(kept, 1700);
  EXPECT_LT(kept, 2400);
}

}  // namespace
}  // namespace ember::test
