// Gradients on the GPU: every gradchecked OpCase run in float64 on cuda:0 and on the CPU, the
// same weighted sum of its floating outputs differentiated on each, and the GPU's input grads
// compared with the CPU's (which tests/ops/op_table_test.cpp checks against finite
// differences). Cases that still reach an op without a CUDA kernel are listed, not passed.
#include <gtest/gtest.h>

#include <set>

#include "ember/autograd.h"
#include "ember/cuda.h"
#include "kernels/layer_norm_grad.h"
#include "ops/frontend.h"
#include "support/op_cases.h"

namespace ember::test {
namespace {

const Device kGpu{DeviceType::CUDA, 0};

// Grads of sum_k (out_k * w_k).sum() with respect to inputs `which`, on the inputs' device.
std::vector<Tensor> grads_of(const OpCase& c, const Inputs& in, const std::vector<int>& which,
                             const std::vector<Tensor>& weights) {
  Inputs leaves = in;
  for (int i : which) leaves[size_t(i)] = in[size_t(i)].detach().requires_grad_(true);
  Inputs out = c.run(leaves);
  Tensor total;
  size_t w = 0;
  for (const Tensor& o : out) {
    if (!o.defined() || !is_floating(o.dtype()) || !o.requires_grad()) continue;
    Tensor term = (o * weights[w++].to(o.device())).sum();
    total = total.defined() ? total + term : term;
  }
  std::vector<Tensor> g;
  if (!total.defined()) return g;
  total.backward();
  for (int i : which) g.push_back(leaves[size_t(i)].grad());
  return g;
}

TEST(CudaOps, GradientsMatchTheCpuGradients) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  int compared = 0;
  std::set<std::string> not_yet;
  for (const OpCase& c : all_op_cases()) {
    if (!c.gradcheck) continue;
    for (const Shapes& shapes : c.shapes) {
      Inputs in;
      if (c.make_inputs) in = c.make_inputs(shapes, DType::Float64);
      else
        for (const Shape& s : shapes) in.push_back(random_tensor(s, DType::Float64));
      std::vector<int> which = c.grad_inputs;
      if (which.empty())
        for (size_t i = 0; i < in.size(); ++i)
          if (in[i].defined() && is_floating(in[i].dtype())) which.push_back(int(i));
      // Every run draws the same random numbers (dropout cases): the generator is reset.
      const auto rng = get_rng_state();
      // Fixed upstream weights, one per output, from a CPU run.
      Inputs probe;
      {
        NoGradGuard g;
        probe = c.run(in);
        set_rng_state(rng);
      }
      std::vector<Tensor> weights;
      for (const Tensor& o : probe)
        if (o.defined() && is_floating(o.dtype())) weights.push_back(random_tensor(o.sizes(), DType::Float64));
      const std::string what = c.name + " shapes=" + [&] {
        std::string s;
        for (const Shape& sh : shapes) s += shape_str(sh);
        return s;
      }();
      std::vector<Tensor> want, got;
      try {
        set_rng_state(rng);
        want = grads_of(c, in, which, weights);
        set_rng_state(rng);
        Inputs gin;
        for (const Tensor& t : in) gin.push_back(t.defined() ? t.cuda() : t);
        got = grads_of(c, gin, which, weights);
      } catch (const std::exception& e) {
        const std::string msg = e.what();
        if (msg.find("no kernel for cuda") != std::string::npos ||
            msg.find("must be on the same device") != std::string::npos) {
          not_yet.insert(c.name);
          continue;
        }
        ADD_FAILURE() << what << ": threw " << msg;
        continue;
      }
      ASSERT_EQ(got.size(), want.size()) << what;
      for (size_t k = 0; k < got.size(); ++k) {
        ASSERT_EQ(got[k].defined(), want[k].defined()) << what << " grad " << k;
        if (!want[k].defined()) continue;
        EXPECT_EQ(got[k].device(), kGpu) << what << " grad " << k;
        EXPECT_EQ(compare(got[k].cpu(), to_ref(want[k]), 1e-9 * c.tol_scale), "")
            << what << " grad of input " << which[k];
        ++compared;
      }
    }
  }
  std::string list;
  for (const std::string& n : not_yet) list += n + " ";
  std::printf("[cuda grads] %d input grads on cuda:0 matched the CPU's; cases still reaching an "
              "op without a CUDA kernel (%zu): %s\n", compared, not_yet.size(), list.c_str());
  EXPECT_GT(compared, 0);
}

// layer_norm's grads over many rows (the column sums of dw and db span several blocks, and rows
// that are no multiple of a block's) and rows of several lengths (held in registers, or not:
// 1001 columns are no whole number of 16-byte chunks), against the CPU in float64.
TEST(CudaOps, LayerNormGradsOverManyRowsMatchTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  for (DType t : {DType::Float32, DType::BFloat16})
    for (auto [rows, n] : {std::pair<int64_t, int64_t>{4099, 768}, {2500, 384}, {700, 1001}}) {
      manual_seed(uint64_t(rows + n));
      const Tensor x = randn({rows, n}), w = randn({n}), b = randn({n}), g = randn({rows, n});
      auto grads = [&](DType dt, Device d) {
        Tensor xl = x.to(t).to(dt).to(d).requires_grad_(true);
        Tensor wl = w.to(t).to(dt).to(d).requires_grad_(true);
        Tensor bl = b.to(t).to(dt).to(d).requires_grad_(true);
        (layer_norm(xl, {n}, wl, bl, 1e-5) * g.to(t).to(dt).to(d)).sum().backward();
        return std::vector<Tensor>{xl.grad(), wl.grad(), bl.grad()};
      };
      const std::vector<Tensor> got = grads(t, kGpu), want = grads(DType::Float64, kCPU);
      const char* names[] = {"dx", "dw", "db"};
      for (size_t k = 0; k < 3; ++k) {
        const Tensor a = got[k].to(kCPU).to(DType::Float64);
        const double scale = want[k].abs().amax().item();
        const double err = (a - want[k]).abs().amax().item();
        EXPECT_LE(err, (t == DType::Float32 ? 1e-4 : 2e-2) * scale)
            << dtype_name(t) << " [" << rows << ", " << n << "] " << names[k];
      }
    }
}

// layer_norm_backward with a 16-bit incoming grad and a residual folded in (what compiled
// graphs run) equals the ops it replaces, bit for bit: the cast to float32, the op, the add.
TEST(CudaOps, FoldedLayerNormBackwardEqualsTheOpsItReplaces) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  NoGradGuard no_grad;
  for (DType gt : {DType::BFloat16, DType::Float32})
    for (bool with_residual : {true, false})
      for (auto [rows, n] : {std::pair<int64_t, int64_t>{3001, 768}, {64, 384}}) {
        manual_seed(uint64_t(rows + n));
        auto gpu = [](const Tensor& t) { return t.to(kGpu); };
        const Tensor x = gpu(randn({rows, n})), w = gpu(randn({n})), b = gpu(randn({n}));
        const Tensor g = gpu(randn({rows, n}).to(gt)), r = gpu(randn({rows, n}));
        const std::vector<Tensor> fwd = dispatch(OpId::layer_norm, {x, w, b}, [&] {
          Attrs a;
          a.shape = {n};
          a.value = 1e-5;
          return a;
        }());
        Attrs a;
        a.shape = {n};
        a.value = 1e-5;
        std::vector<Tensor> want =
            dispatch(OpId::layer_norm_backward, {g.to(DType::Float32), x, fwd[1], fwd[2], w}, a);
        if (with_residual) want[0] = want[0] + r;
        TensorOptions o(DType::Float32);
        o.device = kGpu;
        const Tensor dx = empty({rows, n}, o), dw = empty({n}, o), db = empty({n}, o);
        ASSERT_TRUE(layer_norm_grad::backward_fused(g, x, fwd[1], fwd[2], w,
                                                    with_residual ? r : Tensor(), dx, dw, db));
        const std::string what = std::string(dtype_name(gt)) + (with_residual ? " + residual" : "") +
                                 " [" + std::to_string(rows) + ", " + std::to_string(n) + "]";
        EXPECT_EQ(dx.cpu().to_vector<float>(), want[0].cpu().to_vector<float>()) << what << " dx";
        EXPECT_EQ(dw.cpu().to_vector<float>(), want[1].cpu().to_vector<float>()) << what << " dw";
        EXPECT_EQ(db.cpu().to_vector<float>(), want[2].cpu().to_vector<float>()) << what << " db";
      }
}

}  // namespace
}  // namespace ember::test
