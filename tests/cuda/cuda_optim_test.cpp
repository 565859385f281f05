// The optimizer on the GPU: AdamW's multi-tensor step gives bit for bit the eager update's
// parameters and moments, and gradient clipping the CPU's norm and clipped grads, without the
// host waiting for the device.
#include <gtest/gtest.h>

#include <cmath>

#include "ember/cuda.h"
#include "ember/ember.h"
#include "ember/optim.h"
#include "kernels/multi_tensor.h"

namespace ember::test {
namespace {

const Device kGpu{DeviceType::CUDA, 0};

// Parameters of assorted sizes (a chunk boundary, a scalar, more than one launch's list).
std::vector<Tensor> make_params(Device d) {
  manual_seed(3);
  std::vector<Tensor> ps;
  for (int i = 0; i < 70; ++i) {
    // Whole chunks of the multi-tensor kernels (4096, taken in packs) and tails past them.
    const int64_t n = i == 0 ? 4097 : i == 1 ? 1 : i == 3 ? 3 * 4096 + 5 : 3 + 37 * i;
    Tensor p = randn({n}).to(d);
    p.requires_grad_(true);
    ps.push_back(p);
  }
  return ps;
}

void set_grads(std::vector<Tensor>& ps, int step, double scale) {
  manual_seed(100 + uint64_t(step));
  for (Tensor& p : ps) p.set_grad((randn({p.numel()}) * scale).to(p.device()));
}

TEST(CudaOptim, MultiTensorAdamWEqualsTheEagerUpdateBitForBit) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  std::vector<Tensor> cpu = make_params(kCPU), gpu = make_params(kGpu);
  auto groups = [](const std::vector<Tensor>& ps) {
    optim::ParamGroup decay{{}, 0.1}, none{{}, 0.0};
    for (size_t i = 0; i < ps.size(); ++i) (i % 3 ? decay : none).params.push_back(ps[i]);
    return std::vector<optim::ParamGroup>{decay, none};
  };
  optim::AdamW a(groups(cpu), 1e-2, 0.9, 0.99), b(groups(gpu), 1e-2, 0.9, 0.99);
  ASSERT_TRUE(multi_tensor::takes(gpu));
  for (int step = 0; step < 4; ++step) {
    set_grads(cpu, step, 1.0);
    set_grads(gpu, step, 1.0);
    a.step();
    b.step();
  }
  NoGradGuard no_grad;  // the parameters require grad: copy them to the host without it
  for (size_t i = 0; i < cpu.size(); ++i) {
    std::vector<float> x = cpu[i].to_vector<float>(), y = gpu[i].cpu().to_vector<float>();
    ASSERT_EQ(x, y) << "parameter " << i;
  }
  // The moments too: one more step from equal parameters stays equal only if they are.
  const nn::StateDict sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    if (sa[i].second.dtype() != DType::Float32) continue;
    EXPECT_EQ(sa[i].second.to_vector<float>(), sb[i].second.cpu().to_vector<float>())
        << sa[i].first;
  }
}

// The batched parameter cast (a compiled autocast graph's) rounds as the eager cast does, over
// more tensors than one launch takes and chunk boundaries, with specials among the values.
TEST(CudaOptim, BatchedCastsEqualTheEagerCastsBitForBit) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  NoGradGuard no_grad;
  std::vector<Tensor> src = make_params(kGpu);
  src[1] = tensor({std::nan("")}).to(kGpu);
  src[2] = (tensor({1e30, -1e-30, 65520.0, 3.0}) * (randn({4}).abs() + 1.0)).to(kGpu);
  for (DType t : {DType::BFloat16, DType::Float16}) {
    std::vector<Tensor> dst;
    TensorOptions o(t);
    o.device = kGpu;
    for (const Tensor& x : src) dst.push_back(empty(x.sizes(), o));
    multi_tensor::cast_(src, dst);
    auto same = [&](const Tensor& want, const Tensor& got, const char* what) {
      const std::vector<float> a = want.cpu().to(DType::Float32).to_vector<float>(),
                               b = got.cpu().to(DType::Float32).to_vector<float>();
      ASSERT_EQ(a.size(), b.size());
      for (size_t j = 0; j < a.size(); ++j)
        ASSERT_TRUE(a[j] == b[j] || (std::isnan(a[j]) && std::isnan(b[j])))
            << what << " " << dtype_name(t) << " element " << j << ": " << b[j] << " vs " << a[j];
    };
    for (size_t i = 0; i < src.size(); ++i) same(src[i].to(t), dst[i], "to");
    // And back to float32 (exact: every 16-bit float is a float32).
    std::vector<Tensor> back;
    for (const Tensor& x : src) back.push_back(empty(x.sizes(), TensorOptions(DType::Float32)).to(kGpu));
    multi_tensor::cast_(dst, back);
    for (size_t i = 0; i < src.size(); ++i) same(dst[i].to(DType::Float32), back[i], "back");
  }
}

TEST(CudaOptim, ClippingOnTheGpuMatchesTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  for (double scale : {1.0, 1e-4}) {  // clipped, and left alone (norm below max_norm)
    std::vector<Tensor> cpu = make_params(kCPU), gpu = make_params(kGpu);
    set_grads(cpu, 0, scale);
    set_grads(gpu, 0, scale);
    const Tensor nc = optim::clip_grad_norm_(cpu, 1.0), ng = optim::clip_grad_norm_(gpu, 1.0);
    EXPECT_EQ(ng.device(), kGpu);
    EXPECT_NEAR(ng.item(), nc.item(), 1e-12 * nc.item()) << "scale " << scale;
    for (size_t i = 0; i < cpu.size(); ++i) {
      std::vector<float> x = cpu[i].grad().to_vector<float>(),
                         y = gpu[i].grad().cpu().to_vector<float>();
      for (size_t j = 0; j < x.size(); ++j)
        ASSERT_NEAR(x[j], y[j], 1e-6 * std::abs(x[j])) << "parameter " << i << " scale " << scale;
    }
  }
  // A non-finite norm leaves the grads alone, as on the CPU.
  std::vector<Tensor> gpu = make_params(kGpu);
  set_grads(gpu, 0, 1.0);
  gpu[5].set_grad(full({gpu[5].numel()}, INFINITY).to(kGpu));
  const std::vector<float> before = gpu[7].grad().cpu().to_vector<float>();
  EXPECT_FALSE(std::isfinite(optim::clip_grad_norm_(gpu, 1.0).item()));
  EXPECT_EQ(gpu[7].grad().cpu().to_vector<float>(), before);
}

}  // namespace
}  // namespace ember::test
