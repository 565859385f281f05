// cross_entropy's grad by its own kernel (kernels/cross_entropy_grad.h), what compiled GPU graphs
// run for the autograd formula's fused kernel over 16-bit logits: against those ops run eagerly
// on the GPU, over vocabularies of a few hundred and of GPT-2's 50304 classes, with rows whose
// scale is 0 (ignored targets).
#include <gtest/gtest.h>

#include "dispatch/dispatcher.h"
#include "ember/cuda.h"
#include "ember/ember.h"
#include "kernels/cross_entropy_grad.h"

namespace ember::test {
namespace {

const Device kGpu{DeviceType::CUDA, 0};

TEST(CudaOps, CrossEntropyGradKernelMatchesTheOpsItReplaces) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  NoGradGuard no_grad;
  for (DType t : {DType::BFloat16, DType::Float16})
    for (auto [rows, classes] : {std::pair<int64_t, int64_t>{300, 392}, {64, 50304}}) {
      manual_seed(uint64_t(rows + classes));
      const Tensor logits = (randn({rows, classes}) * 3.0).to(t).to(kGpu);
      const Tensor targets = randint(0, classes, {rows}).to(kGpu);
      Attrs a;
      a.end = -100;  // ignore_index
      const Tensor lse = dispatch(OpId::cross_entropy, {logits, targets}, a)[1];
      // Every third row ignored (scale 0), the rest 1 / count.
      std::vector<float> sv(size_t(rows), 0.f);
      std::vector<int64_t> ignored;
      for (int64_t r = 0; r < rows; ++r) {
        if (r % 3 == 0) ignored.push_back(r);
        else sv[size_t(r)] = 1.f / float(rows);
      }
      const Tensor scale = from_vector(sv, {rows, 1}).to(kGpu);
      TensorOptions o(DType::Int64);
      o.device = kGpu;
      const Tensor hot = targets.unsqueeze(1).eq(arange(classes, o)).to(DType::Float32);
      const Tensor want =
          (((logits.to(DType::Float32) - lse.unsqueeze(1)).exp() - hot) * scale).to(t);
      TensorOptions ot(t);
      ot.device = kGpu;
      const Tensor out = empty({rows, classes}, ot);
      const std::string what =
          std::string(dtype_name(t)) + " [" + std::to_string(rows) + ", " + std::to_string(classes) + "]";
      ASSERT_TRUE(cross_entropy_grad::run(logits, lse.unsqueeze(1), targets.unsqueeze(1), scale, out))
          << what;
      // Its exp and the eager one differ by an ulp of float32 at most: the 16-bit results are
      // equal but where that ulp crosses a rounding tie, and then one 16-bit ulp apart.
      const Tensor g = out.cpu().to(DType::Float64), w = want.cpu().to(DType::Float64);
      // (float16's subnormals are 2^-24 apart.)
      const double ulp = t == DType::BFloat16 ? 0x1p-7 : 0x1p-10;
      const double tiny = t == DType::BFloat16 ? 1e-30 : 0x1p-24;
      EXPECT_LE(((g - w).abs() - w.abs() * ulp).amax().item(), tiny) << what;
      const double differ = g.ne(w).to(DType::Float64).sum().item();
      EXPECT_LE(differ, 1e-3 * double(rows * classes)) << what;
      // The ignored rows are zeros.
      EXPECT_EQ(g.index_select(0, from_vector(ignored, {int64_t(ignored.size())}, DType::Int64)).abs().amax().item(),
                0.0)
          << what;
    }
  // What it does not take: float32 logits, a class count that is no multiple of 8.
  TensorOptions of(DType::Float32);
  of.device = kGpu;
  const Tensor l32 = randn({4, 16}).to(kGpu), per_row = randn({4, 1}).to(kGpu);
  const Tensor tg = randint(0, 16, {4, 1}).to(kGpu);
  EXPECT_FALSE(cross_entropy_grad::run(l32, per_row, tg, per_row, empty({4, 16}, of)));
  TensorOptions ob(DType::BFloat16);
  ob.device = kGpu;
  const Tensor l12 = randn({4, 12}).to(DType::BFloat16).to(kGpu);
  EXPECT_FALSE(cross_entropy_grad::run(l12, per_row, tg, per_row, empty({4, 12}, ob)));
}

}  // namespace
}  // namespace ember::test
