// CUDA devices in tensors: availability as a normal state, clear errors without a device,
// copies between host and device, sync points, and the caching allocator. Tests that need a
// GPU are skipped (and say so) on a machine without one; scripts/test-gpu.sh runs them on one.
#include <gtest/gtest.h>

#include <cmath>

#include "ember/cuda.h"
#include "ember/ember.h"
#include "ember/io.h"
#include "support/expect_error.h"

namespace ember::test {
namespace {

const Device kGpu{DeviceType::CUDA, 0};

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine"

TEST(CudaRuntime, NoDeviceIsANormalStateWithClearErrors) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(cuda::device_count(), 0);
  expect_error([] { zeros({2}).to(kGpu); }, {"cuda:0", "use the CPU"});
  expect_error([] { ones({3}).cuda(); }, "cuda:0");
  cuda::empty_cache();  // nothing to free: not an error
  // The CPU path is untouched.
  EXPECT_EQ((ones({2}) * 2.0).to_vector<float>(), std::vector<float>(2, 2.0f));
}

TEST(CudaRuntime, RoundTripThroughTheDevice) {
  REQUIRE_GPU();
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64, DType::Bool}) {
    Tensor x = (arange(0.0, 24.0) - 7.0).to(dt).view({2, 3, 4});
    Tensor g = x.cuda();
    EXPECT_EQ(g.device(), kGpu);
    EXPECT_EQ(g.sizes(), x.sizes());
    EXPECT_EQ(g.dtype(), dt);
    Tensor back = g.cpu();
    EXPECT_EQ(back.device(), kCPU);
    EXPECT_EQ(back.to_vector<double>(), x.to_vector<double>()) << dtype_name(dt);
    EXPECT_EQ(g.to_vector<double>(), x.to_vector<double>());  // a sync point on the GPU
  }
  // A non-contiguous view is copied as its elements.
  Tensor t = arange(0.0, 12.0).view({3, 4}).t();
  EXPECT_EQ(t.cuda().cpu().to_vector<float>(), t.to_vector<float>());
  EXPECT_EQ(full({1}, 3.5).cuda().item(), 3.5);
  Tensor same = full({2}, 1.0).cuda();
  EXPECT_EQ(same.to(kGpu).impl(), same.impl());  // already there
  TensorOptions on_gpu;
  on_gpu.device = kGpu;
  Tensor z = zeros({2, 2}, on_gpu);  // factories with a device
  EXPECT_EQ(z.device(), kGpu);
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(4, 0.0f));
}

TEST(CudaRuntime, MixedDevicesSayWhatToDo) {
  REQUIRE_GPU();
  Tensor g = ones({4}).cuda(), c = ones({4});
  expect_error([&] { g + c; }, {"cuda:0", "cpu"});
  expect_error([&] { c.add_(g); }, {"cuda:0", "cpu"});
  // Scalars and *_like tensors follow the tensor's device.
  EXPECT_EQ((g * 2.0 + 1.0).device(), kGpu);
  EXPECT_EQ((g * 2.0 + 1.0).to_vector<float>(), std::vector<float>(4, 3.0f));
  EXPECT_EQ(zeros_like(g).device(), kGpu);
  EXPECT_EQ(full_like(g, 5.0).to_vector<float>(), std::vector<float>(4, 5.0f));
  Tensor h = ones({4}).cuda();
  h.add_(2.0);
  h.mul_(g);
  EXPECT_EQ(h.to_vector<float>(), std::vector<float>(4, 3.0f));
  // The process goes on working.
  EXPECT_EQ(g.cpu().to_vector<float>(), std::vector<float>(4, 1.0f));
}

TEST(CudaRuntime, CachingAllocatorReusesBlocksAndCountsThem) {
  REQUIRE_GPU();
  cuda::synchronize();
  cuda::empty_cache();
  cuda::MemoryStats s0 = cuda::memory_stats();
  {
    Tensor a = zeros({1 << 20}).cuda();  // 4 MiB
    cuda::MemoryStats s1 = cuda::memory_stats();
    EXPECT_GE(s1.allocated_bytes, s0.allocated_bytes + (size_t(4) << 20));
    EXPECT_GE(s1.reserved_bytes, s1.allocated_bytes);
  }
  cuda::MemoryStats s2 = cuda::memory_stats();
  EXPECT_EQ(s2.allocated_bytes, s0.allocated_bytes);
  EXPECT_GT(s2.reserved_bytes, s0.reserved_bytes);  // kept for reuse
  int64_t hits = s2.cache_hits;
  { Tensor b = zeros({1 << 20}).cuda(); }
  EXPECT_GT(cuda::memory_stats().cache_hits, hits);
  // Small blocks share segments, and split blocks merge back when freed.
  {
    std::vector<Tensor> small;
    for (int i = 0; i < 64; ++i) small.push_back(full({100}, double(i)).cuda());
    for (int i = 0; i < 64; ++i) EXPECT_EQ(small[size_t(i)].to_vector<float>()[99], float(i));
  }
  cuda::synchronize();
  cuda::empty_cache();
  EXPECT_EQ(cuda::memory_stats().reserved_bytes, s0.reserved_bytes);
  EXPECT_GE(cuda::memory_stats().peak_allocated_bytes, size_t(4) << 20);
}

TEST(CudaRuntime, OutOfMemoryIsAnErrorAndTheProcessGoesOn) {
  REQUIRE_GPU();
  // 2^46 bytes: more than any GPU has.
  TensorOptions on_gpu;
  on_gpu.device = kGpu;
  expect_error([&] { empty({int64_t(1) << 44}, on_gpu); }, {"out of memory on cuda:0", "bytes"});
  EXPECT_GE(cuda::memory_stats().ooms, 1);
  EXPECT_EQ(ones({8}).cuda().cpu().to_vector<float>(), std::vector<float>(8, 1.0f));
}

}  // namespace
}  // namespace ember::test

namespace ember::test {
namespace {

// A kernel that meets a bad index records it; the next wait for the device raises it, names the
// op and the value, and the device goes on working.
TEST(CudaRuntime, BadIndicesOnTheGpuAreErrorsAtTheNextSync) {
  REQUIRE_GPU();
  Tensor w = randn({10, 4});
  Tensor wg = w.cuda();
  Tensor bad = from_vector<int64_t>({1, 12, 3}, {3}, DType::Int64).cuda();
  expect_error([&] { wg.index_select(0, bad).cpu(); },
               {"index_select", "index 12", "out of range", "size 10"});
  Tensor logits = randn({3, 5}).cuda();
  Tensor targets = from_vector<int64_t>({0, 7, 1}, {3}, DType::Int64).cuda();
  expect_error([&] { cross_entropy(logits, targets).item(); }, {"cross_entropy", "7"});
  // Raised once: the next sync is clean, and the same ops on good input are right.
  cuda::synchronize();
  Tensor good = from_vector<int64_t>({1, 9, 3}, {3}, DType::Int64);
  Tensor got = wg.index_select(0, good.cuda()).cpu();
  EXPECT_EQ(got.to_vector<float>(), w.index_select(0, good).to_vector<float>());
}

// Sync points read GPU values through a copy, grads or not.
TEST(CudaRuntime, PrintingAndItemReadGpuValues) {
  REQUIRE_GPU();
  Tensor w = (ones({3}) * 2.0).cuda().requires_grad_(true);
  Tensor s = (w * w).sum();
  EXPECT_EQ(s.item(), 12.0);
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(3, 2.0f));
  const std::string text = to_string(s);
  EXPECT_NE(text.find("12"), std::string::npos) << text;
  EXPECT_NE(text.find("device='cuda:0'"), std::string::npos) << text;
}

// Data to and from the device: batches through pinned memory, copy_ across devices, and
// checkpoints of GPU tensors.
TEST(CudaRuntime, BatchesCopiesAndCheckpointsCrossDevices) {
  REQUIRE_GPU();
  std::vector<uint16_t> tokens(500);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t((i * 7) % 65);
  io::TokenDataset data(tokens);
  for (uint64_t step = 0; step < 5; ++step) {  // pinned blocks are reused across steps
    auto [x, y] = data.get_batch(4, 16, 9, step, kGpu);
    auto [xc, yc] = data.get_batch(4, 16, 9, step);
    EXPECT_EQ(x.device(), kGpu);
    EXPECT_EQ(x.to_vector<int64_t>(), xc.to_vector<int64_t>());
    EXPECT_EQ(y.to_vector<int64_t>(), yc.to_vector<int64_t>());
  }
  Tensor g = zeros({3}).cuda();
  g.copy_(from_vector<float>({1, 2, 3}, {3}));
  EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  Tensor c = zeros({3});
  c.copy_(g * 2.0);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{2, 4, 6}));
  const std::string path = testing::TempDir() + "/ember_cuda_ckpt.safetensors";
  io::save_safetensors(path, {{"w", g.requires_grad_(true)}, {"c", c}});
  const io::NamedTensors back = io::load_safetensors(path).tensors;
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].second.device(), kCPU);
  EXPECT_EQ(back[0].second.to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST(CudaRuntime, Tf32SettingHoldsInAnyBuild) {
  EXPECT_FALSE(cuda::allow_tf32());
  cuda::set_allow_tf32(true);
  EXPECT_TRUE(cuda::allow_tf32());
  cuda::set_allow_tf32(false);
  EXPECT_FALSE(cuda::allow_tf32());
}

// float32 matmuls run in full float32 unless TF32 is allowed; with it they still agree with
// float64 to TF32's precision (a 10-bit mantissa).
TEST(CudaRuntime, Tf32IsAnOptIn) {
  REQUIRE_GPU();
  manual_seed(5);
  const Tensor a = randn({256, 256}), b = randn({256, 256});
  const Tensor want = matmul(a.to(DType::Float64), b.to(DType::Float64));
  auto max_err = [&](bool tf32) {
    cuda::set_allow_tf32(tf32);
    const Tensor got = matmul(a.cuda(), b.cuda()).cpu().to(DType::Float64);
    cuda::set_allow_tf32(false);
    return (got - want).abs().amax().item() / want.abs().amax().item();
  };
  EXPECT_FALSE(cuda::allow_tf32());
  const double full = max_err(false), tf32 = max_err(true);
  EXPECT_LT(full, 1e-5);
  EXPECT_LT(tf32, 1e-2);
  EXPECT_GT(tf32, full);  // the tensor-core path ran: it rounds more
}

TEST(CudaRuntime, FactoriesAndRandomOpsRunOnTheDevice) {
  REQUIRE_GPU();
  TensorOptions o(DType::Float32);
  o.device = kGpu;
  EXPECT_EQ(zeros({3}, o).device(), kGpu);
  EXPECT_EQ(arange(0, 5, 1, o).to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4}));
  // The same seed gives the same numbers on both devices: the same bits for uniform draws; for
  // normals the same draws through the devices' log/sin/cos, which may differ in the last bit.
  manual_seed(11);
  Tensor a = rand({1001}, o);
  Tensor an = randn({1001}, o);
  manual_seed(11);
  Tensor b = rand({1001});
  Tensor bn = randn({1001});
  EXPECT_EQ(a.device(), kGpu);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  const std::vector<float> gn = an.to_vector<float>(), cn = bn.to_vector<float>();
  for (size_t i = 0; i < gn.size(); ++i) EXPECT_NEAR(gn[i], cn[i], 1e-6 * (1 + std::abs(cn[i])));
  manual_seed(5);
  Tensor m = multinomial(rand({4, 30}, o), 6, false);
  manual_seed(5);
  Tensor mc = multinomial(rand({4, 30}), 6, false);
  EXPECT_EQ(m.to_vector<int64_t>(), mc.to_vector<int64_t>());
}

}  // namespace
}  // namespace ember::test
