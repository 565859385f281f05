// compile() on GPU tensors: graphs become generated CUDA kernels (render_cuda.h, built by
// NVRTC) around the eager GPU ops they leave (matmuls, attention, gathers), and their results
// match eager CUDA's: every op case, the random programs, row ops at model shapes. Kernels are
// cached on disk; dropout still draws a fresh mask at every call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "capture/capture_test_util.h"
#include "compiler/compiler_test_util.h"
#include "compiler/toolchain_cuda.h"
#include "ember/autograd.h"
#include "ember/compile.h"
#include "ember/cuda.h"
#include "ember/ember.h"
#include "ember/nn.h"
#include "ember/autocast.h"
#include "support/expect_error.h"
#include "support/op_cases.h"
#include "support/program_check.h"
#include "support/program_gen.h"

namespace ember::test {
namespace {

const Device kGpu{DeviceType::CUDA, 0};

int64_t modules_loaded() {
  const compiler::CudaToolchainStats s = compiler::cuda_toolchain_stats();
  return s.nvrtc_runs + s.disk_hits + s.memory_hits;
}

// Compiled against eager on the same GPU: float32 within rtol/atol 1e-5 (sums in another order,
// FMA contraction) times `scale`, float64 1e-12, integers and bools exact. 16-bit floats within
// 4 units in the last place (bfloat16 2^-5, float16 2^-8): a fused kernel keeps a chain's
// intermediates in float32 where eager rounds each one to 16 bits.
std::string mismatch(const Tensor& got, const Tensor& want, double scale = 1) {
  if (got.sizes() != want.sizes() || got.dtype() != want.dtype())
    return "metadata: " + got.shape_str() + " " + std::string(dtype_name(got.dtype())) + " vs " +
           want.shape_str() + " " + std::string(dtype_name(want.dtype()));
  const DType t = got.dtype();
  const double tol = scale * (t == DType::Float64    ? 1e-12
                              : t == DType::Float32  ? 1e-5
                              : t == DType::BFloat16 ? 0.03125
                              : t == DType::Float16  ? 0.00390625
                                                     : 0);
  std::vector<double> x = got.detach().cpu().to_vector<double>(),
                      y = want.detach().cpu().to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i]))) continue;
    if (!(std::abs(x[i] - y[i]) <= tol + tol * std::abs(y[i])))
      return "element " + std::to_string(i) + ": " + std::to_string(x[i]) + " vs " +
             std::to_string(y[i]);
  }
  return "";
}

Tensor block(const Tensor& x, const Tensor& w) {
  Tensor h = (matmul(x, w) + 1.0).relu();
  return h.softmax(-1).sum({0});
}

class CudaCompile : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
    ASSERT_TRUE(compiler::nvrtc_available()) << "a GPU but no NVRTC: generated kernels cannot run";
  }
  CacheDir dir{kSharedCompilerCache};
  NoGradGuard no_grad;
};

TEST_F(CudaCompile, GpuGraphsRunGeneratedKernelsAndMatchEager) {
  manual_seed(2);
  const Tensor x = randn({8, 16}).to(kGpu), w = randn({16, 4}).to(kGpu);
  const int64_t before = modules_loaded();
  auto f = compile(block, compiler_opts());
  for (int call = 0; call < 3; ++call) {
    const Tensor got = f(x, w), want = block(x, w);
    EXPECT_EQ(got.device(), kGpu);
    EXPECT_EQ(mismatch(got, want), "") << "call " << call;
  }
  EXPECT_EQ(modules_loaded() - before, 1);  // one module, built or found once
}

TEST_F(CudaCompile, DropoutDrawsAFreshMaskAtEveryCall) {
  auto f = compile([](const Tensor& x) { return dropout(x, 0.5, true); }, compiler_opts());
  const Tensor x = ones({4096}).to(kGpu);
  const std::vector<float> a = f(x).cpu().to_vector<float>(), b = f(x).cpu().to_vector<float>();
  EXPECT_NE(a, b);  // a frozen mask would repeat
  int kept = 0;
  for (float v : a) kept += v != 0;
  EXPECT_GT(kept, 1700);
  EXPECT_LT(kept, 2400);
}

// Dropout in a compiled training function: under capture it is dropout_rng on an rng_state,
// which the compiler fuses with the ops around it, in the forward and in the backward. From the
// same seed the values and grads are eager's, and exactly the elements eager drops get no grad.
TEST_F(CudaCompile, FusedDropoutDropsWhatEagerDrops) {
  EnableGradGuard grad;  // the fixture turns grad mode off
  auto fn = [](const Tensor& x, const Tensor& r) {
    return ((r + dropout(x * 2.0, 0.3, true)) * r).to(DType::Float32).sum();
  };
  auto f = compile(fn, compiler_opts());
  for (DType t : {DType::Float32, DType::BFloat16}) {
    TensorOptions o(t);
    o.device = kGpu;
    manual_seed(4);
    const Tensor x0 = randn({64, 96}, o), r0 = randn({64, 96}, o);
    std::vector<float> losses;
    for (uint64_t seed : {31u, 32u}) {
      const std::string what = std::string(dtype_name(t)) + " seed " + std::to_string(seed);
      Tensor xa = x0.detach().requires_grad_(true), ra = r0.detach().requires_grad_(true);
      Tensor xb = x0.detach().requires_grad_(true), rb = r0.detach().requires_grad_(true);
      manual_seed(seed);
      const Tensor got = f(xa, ra);
      got.backward();
      manual_seed(seed);
      const Tensor want = fn(xb, rb);
      want.backward();
      // The loss sums 6144 terms in another order (a float32 sum that long moves by 1e-4 of
      // itself); the grads are elementwise.
      const double g = got.detach().cpu().item(), w = want.detach().cpu().item();
      EXPECT_NEAR(g, w, (t == DType::Float32 ? 1e-3 : 2e-2) * std::abs(w)) << what;
      EXPECT_EQ(mismatch(xa.grad(), xb.grad(), 2), "") << what;
      EXPECT_EQ(mismatch(ra.grad(), rb.grad(), 2), "") << what;
      const Tensor dropped = xa.grad().eq(0.0), eager_dropped = xb.grad().eq(0.0);
      EXPECT_EQ(dropped.ne(eager_dropped).sum().item(), 0.0) << what;
      const double share = dropped.sum().item() / double(64 * 96);
      EXPECT_GT(share, 0.25) << what;
      EXPECT_LT(share, 0.35) << what;
      losses.push_back(got.detach().cpu().item<float>());
    }
    EXPECT_NE(losses[0], losses[1]) << dtype_name(t);  // fresh masks
  }
}

// Attention with dropout, compiled for training: the fused op under capture takes its draws
// from an rng_state tensor, so each call draws a fresh mask, the mask eager draws from the same
// generator state, in the forward and again in the backward.
TEST_F(CudaCompile, AttentionWithDropoutTrainsFusedWithFreshMasks) {
  EnableGradGuard grad;  // the fixture turns grad mode off
  auto fn = [](const Tensor& q, const Tensor& k, const Tensor& v) {
    return (scaled_dot_product_attention(q, k, v, true, 0.3) * v).sum();
  };
  auto f = compile(fn, compiler_opts());
  TensorOptions o(DType::BFloat16);
  o.device = kGpu;
  manual_seed(3);
  const Tensor q0 = randn({2, 3, 80, 64}, o), k0 = randn({2, 3, 80, 64}, o),
               v0 = randn({2, 3, 80, 64}, o);
  auto leaves = [&] {
    return std::vector<Tensor>{q0.detach().requires_grad_(true), k0.detach().requires_grad_(true),
                               v0.detach().requires_grad_(true)};
  };
  std::vector<float> losses;
  for (uint64_t seed : {11u, 12u, 13u}) {
    std::vector<Tensor> a = leaves(), b = leaves();
    manual_seed(seed);
    const Tensor got = f(a[0], a[1], a[2]);
    got.backward();
    manual_seed(seed);
    const Tensor want = fn(b[0], b[1], b[2]);
    want.backward();
    EXPECT_EQ(mismatch(got, want, 2), "") << "seed " << seed;
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(mismatch(a[size_t(i)].grad(), b[size_t(i)].grad(), 2), "")
          << "grad " << i << " seed " << seed;
    losses.push_back(got.detach().cpu().item<float>());
  }
  EXPECT_NE(losses[0], losses[1]);  // a frozen mask would repeat the loss
  EXPECT_NE(losses[1], losses[2]);
}

// A GPT's training step under bfloat16 autocast, compiled (its parameters cast to bfloat16 in
// one launch, their grads back to float32 in another) against eager: the loss and every
// parameter's grad, within what bfloat16 rounding in another order allows.
TEST_F(CudaCompile, AutocastTrainingStepMatchesEager) {
  EnableGradGuard grad;
  manual_seed(5);
  nn::GPT m(tiny_gpt());
  m.to(kGpu);
  TensorOptions ids(DType::Int64);
  ids.device = kGpu;
  const Tensor x = randint(0, 11, {4, 8}, ids), y = randint(0, 11, {4, 8}, ids);
  auto loss_fn = compile([&m](const Tensor& a, const Tensor& b) { return m.loss(a, b); },
                         compiler_opts());
  std::vector<std::vector<Tensor>> grads(2);
  std::vector<float> losses;
  for (int compiled = 0; compiled < 2; ++compiled) {
    for (Tensor& p : m.parameters()) p.set_grad(Tensor());
    Tensor loss;
    {
      autocast scope(DType::BFloat16);
      loss = compiled ? loss_fn(x, y) : m.loss(x, y);
    }
    loss.backward();
    losses.push_back(loss.detach().cpu().item<float>());
    for (const Tensor& p : m.parameters()) grads[size_t(compiled)].push_back(p.grad().detach().cpu());
  }
  EXPECT_NEAR(losses[1], losses[0], 2e-2 * std::abs(losses[0]));
  for (size_t i = 0; i < grads[0].size(); ++i) {
    ASSERT_TRUE(grads[1][i].defined()) << "parameter " << i;
    EXPECT_EQ(grads[1][i].dtype(), DType::Float32);
    const double scale = grads[0][i].abs().amax().item();
    EXPECT_LE((grads[1][i] - grads[0][i]).abs().amax().item(), 0.05 * scale + 1e-6)
        << "parameter " << i << " " << grads[0][i].shape_str();
  }
}

// A pointwise result that replaces an input (a cache written each step) is written into the
// input by its kernel where that is safe, and through a buffer copied over it where the kernel
// reads the input at other indices (a transposed view) or something later reads the old
// contents; either way the input and the results equal eager's.
TEST_F(CudaCompile, ResultsWrittenIntoInputsMatchEager) {
  manual_seed(9);
  TensorOptions o;
  o.device = kGpu;
  using Fn = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<const char*, Fn>> fns = {
      {"in place", [](const Tensor& s, const Tensor& a) {
         Tensor t = s;
         t.copy_(t * 0.5 + a.tanh());
         return (t * 2.0).sum({1});
       }},
      {"old contents read after", [](const Tensor& s, const Tensor& a) {
         Tensor t = s;
         Tensor old = t.exp();
         t.copy_(a * 2.0 - t);
         return old + t;
       }},
      {"reads a transposed view", [](const Tensor& s, const Tensor& a) {
         Tensor t = s;
         t.copy_(t.transpose(0, 1) + a);
         return t.sum({0});
       }},
  };
  for (const auto& [what, fn] : fns) {
    auto f = compile(fn, compiler_opts());
    for (int call = 0; call < 3; ++call) {
      const Tensor a = randn({24, 24}, o), s0 = randn({24, 24}, o);
      Tensor s_eager = s0.clone(), s_compiled = s0.clone();
      const Tensor want = fn(s_eager, a), got = f(s_compiled, a);
      EXPECT_EQ(mismatch(s_compiled, s_eager), "") << what << ", call " << call;
      EXPECT_EQ(mismatch(got, want), "") << what << ", call " << call;
    }
  }
}

// An arange only other nodes read, which the compiled graph makes once when it is built where
// its plan leaves it an eager node (made_once), serves every call: a decode step's slot mask
// against a position that changes each call, and the slots added to the result, match eager
// at each call.
TEST_F(CudaCompile, AnArangeMadeOnceServesEveryCall) {
  manual_seed(12);
  TensorOptions o;
  o.device = kGpu;
  TensorOptions ids(DType::Int64);
  ids.device = kGpu;
  auto fn = [ids](const Tensor& x, const Tensor& pos) {
    const Tensor slots = arange(16, ids);
    return where(slots.eq(pos).view({16, 1}), x, -x) + slots.to(DType::Float32).view({16, 1}).exp();
  };
  auto f = compile(std::function<Tensor(const Tensor&, const Tensor&)>(fn), compiler_opts());
  for (int call = 0; call < 4; ++call) {
    const Tensor x = randn({16, 8}, o);
    const Tensor pos = full({1}, double(3 * call + 1), ids);
    EXPECT_EQ(mismatch(f(x, pos), fn(x, pos)), "") << "call " << call;
  }
}

// A GPT's token and position embeddings, index_select twice and summed, in one kernel
// (EmbeddingFold): eager's sums in float32 and bfloat16, for one token a row (a decode step) and
// several; an index past the table is index_select's error at the next sync.
TEST_F(CudaCompile, EmbeddingLookupsSummedInOneKernelMatchEager) {
  manual_seed(13);
  TensorOptions ids(DType::Int64);
  ids.device = kGpu;
  for (const DType t : {DType::Float32, DType::BFloat16}) {
    const Tensor wte = randn({65, 48}).to(t).to(kGpu), wpe = randn({32, 48}).to(t).to(kGpu);
    auto fn = [&](const Tensor& idx, const Tensor& pos) {
      return embedding(wte, idx) + embedding(wpe, pos);
    };
    auto f = compile(std::function<Tensor(const Tensor&, const Tensor&)>(fn), compiler_opts());
    for (int call = 0; call < 3; ++call) {
      const Tensor idx = randint(0, 65, {1, 1}, ids), pos = full({1}, double(call * 7), ids);
      EXPECT_EQ(mismatch(f(idx, pos), fn(idx, pos)), "") << dtype_name(t) << " call " << call;
    }
    auto g = compile(std::function<Tensor(const Tensor&, const Tensor&)>(fn), compiler_opts());
    const Tensor idx = randint(0, 65, {2, 5}, ids), pos = arange(5, ids);
    EXPECT_EQ(mismatch(g(idx, pos), fn(idx, pos)), "") << dtype_name(t) << " [2, 5] tokens";
    const Tensor bad = full({1, 1}, 70.0, ids), pos0 = zeros({1}, ids);
    f(randint(0, 65, {1, 1}, ids), pos0);  // the compiled entry, before the bad call
    expect_error([&] { f(bad, pos0).cpu(); }, {"index_select", "index 70", "out of range"});
    cuda::synchronize();
  }
}

TEST_F(CudaCompile, KernelsAreCachedOnDiskAcrossProcesses) {
  const std::string fresh = std::filesystem::temp_directory_path() / "ember-cuda-cache-test";
  std::filesystem::remove_all(fresh);
  CacheDir own(fresh);
  auto fn = [](const Tensor& a, const Tensor& b) { return (a * 3.25 + b).tanh() - b; };
  const Tensor a = randn({1000, 33}).to(kGpu), b = randn({33}).to(kGpu);
  const Tensor want = fn(a, b);
  compiler::CudaToolchainStats s0 = compiler::cuda_toolchain_stats();
  EXPECT_EQ(mismatch(compile(fn, compiler_opts())(a, b), want), "");
  compiler::CudaToolchainStats s1 = compiler::cuda_toolchain_stats();
  EXPECT_EQ(s1.nvrtc_runs - s0.nvrtc_runs, 1);
  // As a new process would: nothing loaded, the disk entry there.
  compiler::clear_cuda_memory_cache();
  reset_compile_caches();
  EXPECT_EQ(mismatch(compile(fn, compiler_opts())(a, b), want), "");
  compiler::CudaToolchainStats s2 = compiler::cuda_toolchain_stats();
  EXPECT_EQ(s2.nvrtc_runs, s1.nvrtc_runs);
  EXPECT_EQ(s2.disk_hits - s1.disk_hits, 1);
  std::filesystem::remove_all(fresh);
}

// Softmax, log_softmax and layer_norm with producers and consumers, at the GPT's shapes (rows
// of 384 and 65 held in registers; GPT-2's 50304-wide rows passed again) and odd ones.
TEST_F(CudaCompile, RowKernelsMatchEagerAtModelShapes) {
  manual_seed(5);
  for (const Shape& s : std::vector<Shape>{{512, 384}, {300, 65}, {4, 50304}, {7, 1}, {64, 4096}}) {
    const int64_t n = s.back();
    TensorOptions o;
    o.device = kGpu;
    const Tensor x = randn(s, o) * 3.0, w = randn({n}, o), b = randn({n}, o);
    auto fn = [&](const Tensor& x) {
      Tensor h = layer_norm(x * 0.5 + 1.0, {n}, w, b, 1e-5);
      return std::vector<Tensor>{h.gelu(), (x + 2.0).softmax(-1) * 2.0,
                                 log_softmax(x.relu(), -1), (x * x).sum({-1}, true) + 1.0};
    };
    auto f = compile(fn, compiler_opts());
    std::vector<Tensor> got = f(x), want = fn(x);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_EQ(mismatch(got[k], want[k], 10), "") << shape_str(s) << " output " << k;
    // Rows that start off 16-byte boundaries (a view one column in): the scalar accesses.
    const Tensor wide = randn({s[0], n + 5}, o), view = wide.slice(1, 1, n + 1);
    auto g = compile(fn, compiler_opts());
    got = g(view);
    want = fn(view);
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_EQ(mismatch(got[k], want[k], 10), "") << shape_str(s) << " view, output " << k;
  }
}

// A function called at every length of a sequence builds few modules: the graphs of one form
// share kernels over symbolic sizes (compiler/families.h), bound to each call's sizes.
TEST_F(CudaCompile, SizesThatVaryShareCompiledKernels) {
  const std::string fresh = std::filesystem::temp_directory_path() / "ember-cuda-dynamic-test";
  std::filesystem::remove_all(fresh);
  CacheDir own(fresh);
  TensorOptions o;
  o.device = kGpu;
  const Tensor w = randn({96}, o), b = randn({96}, o);
  auto fn = [&](const Tensor& x) {
    Tensor h = layer_norm(x, {96}, w, b, 1e-5).gelu();
    return (h * 0.5 + x).softmax(-1);
  };
  auto f = compile(fn, compiler_opts());
  const compiler::CudaToolchainStats s0 = compiler::cuda_toolchain_stats();
  for (int64_t t = 1; t <= 40; ++t) {
    const Tensor x = randn({3, t, 96}, o);
    EXPECT_EQ(mismatch(f(x), fn(x), 10), "") << "T = " << t;
  }
  const compiler::CudaToolchainStats s1 = compiler::cuda_toolchain_stats();
  const int64_t built = (s1.nvrtc_runs - s0.nvrtc_runs) + (s1.disk_hits - s0.disk_hits);
  EXPECT_LE(built, 3) << "modules built for 40 lengths";
  EXPECT_GE(f.stats().shared_compiles, 35);
  std::filesystem::remove_all(fresh);
}

// Every op case whose eager run works on the GPU, all of them in one compiled program per
// dtype (the 16-bit floats included), against eager CUDA case by case.
TEST_F(CudaCompile, EveryOpCaseMatchesEagerCuda) {
  for (DType dtype :
       {DType::Float32, DType::Float64, DType::Int64, DType::BFloat16, DType::Float16}) {
    struct Item {
      const OpCase* c;
      Inputs inputs;
      Inputs want;
      size_t first = 0;
    };
    std::vector<Item> items;
    size_t at = 0;
    for (const OpCase& c : all_op_cases()) {
      bool random = false;
      for (OpId op : c.covers) random |= op_info(op).kind == OpKind::Random;
      if (random || std::find(c.dtypes.begin(), c.dtypes.end(), dtype) == c.dtypes.end()) continue;
      for (const Shapes& shapes : c.shapes) {
        Inputs in;
        if (c.make_inputs) in = c.make_inputs(shapes, dtype);
        else
          for (const Shape& s : shapes) in.push_back(random_tensor(s, dtype));
        for (Tensor& t : in)
          if (t.defined()) t = t.cuda();
        Item it{&c, in, {}, at};
        try {
          it.want = c.run(in);
        } catch (const std::exception&) {
          continue;  // not on the GPU in eager mode either (tests/cuda/cuda_ops_test.cpp lists it)
        }
        at += in.size();
        items.push_back(std::move(it));
      }
    }
    ASSERT_GT(items.size(), 50u) << dtype_name(dtype);
    std::vector<Tensor> flat;
    for (const Item& it : items) flat.insert(flat.end(), it.inputs.begin(), it.inputs.end());
    auto program = [&items](const std::vector<Tensor>& all) {
      std::vector<Tensor> outs;
      for (const Item& it : items) {
        Inputs in(all.begin() + long(it.first), all.begin() + long(it.first + it.inputs.size()));
        Inputs o = it.c->run(in);
        outs.insert(outs.end(), o.begin(), o.end());
      }
      return outs;
    };
    auto compiled = compile(program, compiler_opts());
    compiled(flat);
    const std::vector<Tensor> got = compiled(flat);
    size_t k = 0;
    for (const Item& it : items)
      for (size_t j = 0; j < it.want.size(); ++j, ++k) {
        ASSERT_LT(k, got.size());
        EXPECT_EQ(mismatch(got[k], it.want[j], it.c->tol_scale), "")
            << it.c->name << " output " << j << " (" << dtype_name(dtype) << ")";
      }
    EXPECT_EQ(k, got.size());
    std::printf("[cuda compile] %s: %zu op cases compiled on cuda:0\n", std::string(dtype_name(dtype)).c_str(),
                items.size());
  }
}

// The random programs (tests/support/program_gen.h) on the GPU, compiled against eager CUDA.
TEST_F(CudaCompile, RandomProgramsMatchEagerCuda) {
  constexpr uint64_t kPrograms = 300;
  uint64_t ran = 0;
  for (uint64_t seed = 1; seed <= kPrograms; ++seed) {
    const testgen::Program p = testgen::generate_program(seed);
    std::vector<Tensor> in = testgen::make_inputs(p, seed);
    for (Tensor& t : in) t = t.cuda();
    std::vector<Tensor> want;
    try {
      want = testgen::run_part(p, in);
    } catch (const std::exception&) {
      continue;  // an op without a CUDA kernel, or a CPU tensor made inside
    }
    auto f = compile([&p](const std::vector<Tensor>& xs) { return testgen::run_part(p, xs); },
                     compiler_opts());
    for (int call = 0; call < 2; ++call) {
      std::vector<Tensor> got = f(in);
      ASSERT_EQ(got.size(), want.size()) << testgen::to_string(p);
      for (size_t k = 0; k < got.size(); ++k)
        EXPECT_EQ(mismatch(got[k], want[k], 10), "")
            << "seed " << seed << " call " << call << " output " << k << "\n"
            << testgen::to_string(p);
    }
    ++ran;
  }
  std::printf("[cuda compile] %llu of %llu random programs ran on cuda:0\n",
              static_cast<unsigned long long>(ran), static_cast<unsigned long long>(kPrograms));
  EXPECT_GT(ran, kPrograms / 2);
}

}  // namespace
}  // namespace ember::test
