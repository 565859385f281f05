// The model zoo on the GPU: each model of include/ember/models.h, moved to cuda:0 with the
// weights of its CPU twin, gives the CPU's loss and parameter grads (eager, the CUDA kernels
// against the CPU's), and its compiled loss on GPU tensors equals its eager one in one graph.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "ember/compile.h"
#include "ember/cuda.h"
#include "ember/ember.h"
#include "ember/models.h"

namespace ember::test {
namespace {

using namespace ember::models;
const Device kGpu{DeviceType::CUDA, 0};

double max_abs_diff(const Tensor& a, const Tensor& b) {
  NoGradGuard no_grad;
  return (a.cpu().to(DType::Float64) - b.cpu().to(DType::Float64)).abs().amax().item();
}

double max_abs(const Tensor& a) {
  NoGradGuard no_grad;
  return a.cpu().to(DType::Float64).abs().amax().item();
}

// Two models of one seed, one moved to the GPU; inputs made on the CPU. The losses agree within
// 1e-4 relative, every grad within 1e-3 of its largest entry (float32 sums in another order),
// plus 1e-7 for the values that are zero in exact arithmetic (a conv bias before a BatchNorm).
template <class M, class Cfg, class... A>
void expect_gpu_follows_cpu(const Cfg& cfg, bool training, const A&... inputs) {
  manual_seed(11);
  auto cpu = std::make_shared<M>(cfg);
  manual_seed(11);
  auto gpu = std::make_shared<M>(cfg);
  cpu->train(training);
  gpu->train(training);
  gpu->to(kGpu);
  for (auto& [n, p] : gpu->named_parameters()) ASSERT_EQ(p.device(), kGpu) << n;
  Tensor lc = cpu->loss(inputs...);
  Tensor lg = gpu->loss(inputs.to(kGpu)...);
  ASSERT_EQ(lg.device(), kGpu);
  EXPECT_NEAR(lg.item(), lc.item(), 1e-4 * std::max(1.0, std::abs(lc.item())));
  lc.backward();
  lg.backward();
  auto cp = cpu->named_parameters(), gp = gpu->named_parameters();
  ASSERT_EQ(cp.size(), gp.size());
  for (size_t i = 0; i < cp.size(); ++i) {
    ASSERT_TRUE(gp[i].second.grad().defined()) << gp[i].first;
    const double scale = max_abs(cp[i].second.grad()) + 1e-6;
    EXPECT_LE(max_abs_diff(gp[i].second.grad(), cp[i].second.grad()), 1e-3 * scale + 1e-7)
        << cp[i].first;
  }
  // Buffers (BatchNorm's running statistics) moved with the model and updated alike.
  auto bc = cpu->named_buffers(), bg = gpu->named_buffers();
  ASSERT_EQ(bc.size(), bg.size());
  for (size_t i = 0; i < bc.size(); ++i) {
    EXPECT_EQ(bg[i].second.device(), kGpu) << bg[i].first;
    EXPECT_LE(max_abs_diff(bg[i].second, bc[i].second), 1e-4 * max_abs(bc[i].second) + 1e-7)
        << bc[i].first;
  }
  // The compiled loss on GPU tensors (eval mode): one graph, eager's values.
  NoGradGuard no_grad;
  gpu->eval();
  auto cg = compile([m = gpu](const auto&... a) { return m->loss(a...); });
  for (int call = 0; call < 2; ++call) {
    Tensor got = cg(inputs.to(kGpu)...), want = gpu->loss(inputs.to(kGpu)...);
    EXPECT_EQ(got.device(), kGpu);
    EXPECT_LE(max_abs_diff(got, want), 1e-5 * (max_abs(want) + 1.0)) << "call " << call;
  }
  EXPECT_EQ(cg.explain().graph_count, 1);
}

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine"

TEST(CudaModels, MLP) {
  SKIP_WITHOUT_GPU();
  manual_seed(0);
  expect_gpu_follows_cpu<MLP>(MLPConfig::tiny(), true, randn({8, 16}), randint(0, 4, {8}));
}

TEST(CudaModels, ResNetWithBatchNormInTraining) {
  SKIP_WITHOUT_GPU();
  manual_seed(0);
  expect_gpu_follows_cpu<ResNet>(ResNetConfig::tiny(), true, randn({4, 3, 16, 16}),
                                 randint(0, 10, {4}));
}

TEST(CudaModels, MobileNetV2) {
  SKIP_WITHOUT_GPU();
  manual_seed(0);
  expect_gpu_follows_cpu<MobileNetV2>(MobileNetV2Config::tiny(), true, randn({2, 3, 16, 16}),
                                      randint(0, 10, {2}));
}

TEST(CudaModels, ViT) {
  SKIP_WITHOUT_GPU();
  manual_seed(0);
  expect_gpu_follows_cpu<ViT>(ViTConfig::tiny(), true, randn({2, 3, 16, 16}),
                              randint(0, 10, {2}));
}

TEST(CudaModels, BertWithPadding) {
  SKIP_WITHOUT_GPU();
  manual_seed(0);
  Tensor ids = randint(0, 50, {2, 8}), lengths = from_vector<int64_t>({8, 5}, {2}, DType::Int64);
  Tensor targets = where(Bert::padding_mask(lengths, 8), full_like(ids, -100), ids);
  expect_gpu_follows_cpu<Bert>(BertConfig::tiny(), true, ids, lengths, targets);
}

TEST(CudaModels, LlamaRotaryTablesMoveWithTheModel) {
  SKIP_WITHOUT_GPU();
  manual_seed(0);
  expect_gpu_follows_cpu<Llama>(LlamaConfig::tiny(), true, randint(0, 64, {2, 8}),
                                randint(0, 64, {2, 8}));
}

TEST(CudaModels, MixtureOfExperts) {
  SKIP_WITHOUT_GPU();
  manual_seed(0);
  expect_gpu_follows_cpu<MoETransformer>(MoEConfig::tiny(), true, randint(0, 64, {2, 8}),
                                         randint(0, 64, {2, 8}));
}

TEST(CudaModels, GRULanguageModel) {
  SKIP_WITHOUT_GPU();
  manual_seed(0);
  expect_gpu_follows_cpu<GRULM>(GRULMConfig::tiny(), true, randint(0, 32, {2, 6}),
                                randint(0, 32, {2, 6}));
}

TEST(CudaModels, UNet) {
  SKIP_WITHOUT_GPU();
  manual_seed(0);
  expect_gpu_follows_cpu<UNet>(UNetConfig::tiny(), true, randn({2, 3, 16, 16}),
                               randn({2, 2, 16, 16}));
}

}  // namespace
}  // namespace ember::test
