// The fused attention kernels on the GPU (kernels/cuda/attention_*.cu): out, lse and the grads
// equal the CPU kernels' from the same inputs and generator state (dropout included) at the
// target shape's head size, in every dtype, at both head tiles, with the GPT's strided q, k, v;
// scaled_dot_product_attention takes the fused op on CUDA (autocast included) and its math path
// for heads over 128; the op itself names the head size it cannot take.
#include <gtest/gtest.h>

#include <cmath>

#include "ember/cuda.h"
#include "ember/ember.h"
#include "kernels/cuda/attention_cudnn.h"
#include "ops/attention.h"
#include "support/expect_error.h"
#include "support/op_cases.h"

namespace ember::test {
namespace {

const Device kGpu{DeviceType::CUDA, 0};

// max |a - b| / (1 + max |b|), on the host in float64.
double rel_diff(const Tensor& a, const Tensor& b) {
  NoGradGuard no_grad;
  const Tensor x = a.cpu().to(DType::Float64), y = b.cpu().to(DType::Float64);
  if (x.numel() == 0) return 0;
  return (x - y).abs().amax().item() / (1 + y.abs().amax().item());
}

struct Result {
  Tensor out, lse, dq, dk, dv;
};

// The fused op forward and backward (grad of sum(out * w)) from leaves on `device`, with the
// generator at `seed`. q, k, v may be views of one tensor (the GPT's layout).
Result run_fused(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& w,
                 Device device, bool causal, double p, uint64_t seed) {
  Tensor q = q0.to(device).detach().requires_grad_(true);
  Tensor k = k0.to(device).detach().requires_grad_(true);
  Tensor v = v0.to(device).detach().requires_grad_(true);
  manual_seed(seed);
  AttentionResult r = fused_attention(q, k, v, causal, p, std::nullopt);
  (r.out * w.to(device)).sum().backward();
  return {r.out, r.lse, q.grad(), k.grad(), v.grad()};
}

void expect_same(const Result& gpu, const Result& cpu, double tol, const std::string& what) {
  EXPECT_EQ(gpu.out.device(), kGpu) << what;
  EXPECT_LT(rel_diff(gpu.out, cpu.out), tol) << what << " out";
  EXPECT_LT(rel_diff(gpu.lse, cpu.lse), 1e-5) << what << " lse";
  EXPECT_LT(rel_diff(gpu.dq, cpu.dq), tol) << what << " dq";
  EXPECT_LT(rel_diff(gpu.dk, cpu.dk), tol) << what << " dk";
  EXPECT_LT(rel_diff(gpu.dv, cpu.dv), tol) << what << " dv";
}

TEST(CudaAttention, MatchesTheCpuKernelsWithDropout) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  for (DType t : {DType::BFloat16, DType::Float16, DType::Float32, DType::Float64})
    for (bool causal : {true, false}) {
      const Tensor q = random_tensor({2, 3, 100, 64}, t), k = random_tensor({2, 3, 90, 64}, t),
                   v = random_tensor({2, 3, 90, 64}, t), w = random_tensor({2, 3, 100, 64}, t);
      const Result cpu = run_fused(q, k, v, w, kCPU, causal, 0.2, 11);
      const Result gpu = run_fused(q, k, v, w, kGpu, causal, 0.2, 11);
      const double tol = t == DType::Float64 ? 1e-10 : t == DType::Float32 ? 1e-5 : 2e-2;
      expect_same(gpu, cpu, tol, std::string(dtype_name(t)) + (causal ? " causal" : ""));
    }
}

// cuDNN's attention off for a scope (ember's own kernels on problems cuDNN would take).
struct WithoutCudnn {
  WithoutCudnn() { cuda::set_cudnn_attention(false); }
  ~WithoutCudnn() { cuda::set_cudnn_attention(true); }
};

TEST(CudaAttention, TensorCoreKernelsOverLongSequences) {
  // 16-bit heads of 64 over many tiles of 64 rows and keys (the tensor-core kernels).
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  WithoutCudnn ours;
  for (DType t : {DType::BFloat16, DType::Float16})
    for (double p : {0.0, 0.1}) {
      const Tensor q = random_tensor({1, 2, 600, 64}, t), k = random_tensor({1, 2, 600, 64}, t),
                   v = random_tensor({1, 2, 600, 64}, t), w = random_tensor({1, 2, 600, 64}, t);
      for (bool causal : {true, false})
        expect_same(run_fused(q, k, v, w, kGpu, causal, p, 5),
                    run_fused(q, k, v, w, kCPU, causal, p, 5), 2e-2,
                    std::string(dtype_name(t)) + (causal ? " causal" : "") + " dropout " +
                        std::to_string(p));
    }
}

// 16-bit heads without dropout run on cuDNN's fused kernels where it is there: out, lse and the
// grads as the CPU kernels give them, for the GPT's strided q, k, v, L != S, causal or not, heads
// of 64 and 128; with dropout, ember's kernels (their masks are the CPU's).
TEST(CudaAttention, CudnnTakesSixteenBitHeadsWithoutDropout) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  if (!cuda::cudnn_attention_available(0))
    GTEST_SKIP() << "ember was built without cuDNN's frontend, or libcudnn did not load";
  for (DType t : {DType::BFloat16, DType::Float16})
    for (int64_t hs : {64, 128})
      for (bool causal : {true, false}) {
        const int64_t B = 2, T = 130, H = 3, C = H * hs;
        const Tensor qkv = random_tensor({B, T, 3 * C}, t), w = random_tensor({B, H, T, hs}, t);
        auto heads = [&](const Tensor& x, int i) {
          return x.slice(2, i * C, (i + 1) * C).view({B, T, H, hs}).transpose(1, 2);
        };
        const std::string what = std::string(dtype_name(t)) + " head " + std::to_string(hs) +
                                 (causal ? " causal" : "");
        const int64_t before = cuda::cudnn_attention_runs();
        const Tensor g = qkv.cuda();
        const Result gpu = run_fused(heads(g, 0), heads(g, 1), heads(g, 2), w, kGpu, causal, 0, 1);
        EXPECT_EQ(cuda::cudnn_attention_runs() - before, 2) << what << ": forward and backward";
        expect_same(gpu, run_fused(heads(qkv, 0), heads(qkv, 1), heads(qkv, 2), w, kCPU, causal, 0, 1),
                    2e-2, what);
        // L != S: 70 queries over 130 keys.
        const Tensor q = random_tensor({B, H, 70, hs}, t), w2 = random_tensor({B, H, 70, hs}, t);
        expect_same(run_fused(q, heads(g, 1), heads(g, 2), w2, kGpu, causal, 0, 1),
                    run_fused(q, heads(qkv, 1), heads(qkv, 2), w2, kCPU, causal, 0, 1), 2e-2,
                    what + " L 70 S 130");
      }
  const int64_t before = cuda::cudnn_attention_runs();
  const Tensor q = random_tensor({1, 2, 100, 64}, DType::BFloat16);
  run_fused(q, q, q, q, kGpu, true, 0.1, 1);
  EXPECT_EQ(cuda::cudnn_attention_runs(), before) << "dropout stays on ember's kernels";
}

TEST(CudaAttention, HeadTileOf128AndOddSizes) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  for (DType t : {DType::Float32, DType::Float64, DType::BFloat16}) {
    const Tensor q = random_tensor({3, 70, 128}, t), k = random_tensor({3, 130, 128}, t),
                 v = random_tensor({3, 130, 72}, t), w = random_tensor({3, 70, 72}, t);
    const double tol = t == DType::Float64 ? 1e-10 : t == DType::Float32 ? 1e-5 : 2e-2;
    expect_same(run_fused(q, k, v, w, kGpu, true, 0.1, 3),
                run_fused(q, k, v, w, kCPU, true, 0.1, 3), tol,
                std::string(dtype_name(t)) + " E 128 F 72");
    const Tensor q2 = random_tensor({2, 33, 5}, t), k2 = random_tensor({2, 17, 5}, t),
                 v2 = random_tensor({2, 17, 3}, t), w2 = random_tensor({2, 33, 3}, t);
    expect_same(run_fused(q2, k2, v2, w2, kGpu, true, 0.0, 3),
                run_fused(q2, k2, v2, w2, kCPU, true, 0.0, 3), tol,
                std::string(dtype_name(t)) + " E 5 F 3, L > S");
  }
}

TEST(CudaAttention, GptLayoutAndScaledDotProductAttention) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  // q, k, v as the GPT makes them: heads of one [B, T, 3C] projection (strided views).
  const int64_t B = 2, T = 48, H = 3, hs = 64, C = H * hs;
  const Tensor qkv = random_tensor({B, T, 3 * C}, DType::Float32);
  auto heads = [&](const Tensor& x, int i) {
    return x.slice(2, i * C, (i + 1) * C).view({B, T, H, hs}).transpose(1, 2);
  };
  const Tensor g = qkv.cuda();
  for (double p : {0.0, 0.2}) {
    manual_seed(21);
    const Tensor cpu =
        scaled_dot_product_attention(heads(qkv, 0), heads(qkv, 1), heads(qkv, 2), true, p);
    manual_seed(21);
    const Tensor gpu = scaled_dot_product_attention(heads(g, 0), heads(g, 1), heads(g, 2), true, p);
    EXPECT_LT(rel_diff(gpu, cpu), 1e-5) << "dropout " << p;
  }
  {
    autocast scope(DType::BFloat16);
    const Tensor y = scaled_dot_product_attention(heads(g, 0), heads(g, 1), heads(g, 2), true);
    EXPECT_EQ(y.dtype(), DType::BFloat16);
  }
}

TEST(CudaAttention, LargeHeadsTakeTheMathPath) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  const Tensor q = random_tensor({2, 9, 160}, DType::Float32),
               k = random_tensor({2, 11, 160}, DType::Float32),
               v = random_tensor({2, 11, 8}, DType::Float32);
  const Tensor cpu = scaled_dot_product_attention(q, k, v, true);
  const Tensor gpu = scaled_dot_product_attention(q.cuda(), k.cuda(), v.cuda(), true);
  EXPECT_LT(rel_diff(gpu, cpu), 1e-5);
  expect_error([&] { fused_attention(q.cuda(), k.cuda(), v.cuda(), true, 0.0, std::nullopt); },
               {"attention", "head sizes up to 128", "E = 160"});
}

}  // namespace
}  // namespace ember::test
