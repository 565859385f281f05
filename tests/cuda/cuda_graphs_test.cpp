// CompileOptions::mode = "reduce-overhead" on a GPU: compiled graphs recorded as CUDA graphs and
// replayed. Replays against eager on fresh inputs; outputs held across replays keep their
// values; writes into inputs land whether the input is read in place or copied in; a training
// step (forward and backward graphs recorded, with and without dropout) and a key/value-cache
// decode give eager's results; a graph that draws random numbers is not recorded and still
// draws fresh ones.
#include <gtest/gtest.h>

#include <cmath>

#include "capture/capture_test_util.h"
#include "compiler/compiler_test_util.h"
#include "compiler/toolchain_cuda.h"
#include "ember/autograd.h"
#include "ember/compile.h"
#include "ember/cuda.h"
#include "ember/ember.h"
#include "ember/nn.h"
#include "ember/optim.h"

namespace ember::test {
namespace {

const Device kGpu{DeviceType::CUDA, 0};

TensorOptions gpu(DType t = DType::Float32) {
  TensorOptions o(t);
  o.device = kGpu;
  return o;
}

CompileOptions graphed() {
  CompileOptions o = compiler_opts();
  o.mode = "reduce-overhead";
  return o;
}

// The largest |got - want| over max(1, |want|), float32 on the host.
double rel_err(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.sizes(), want.sizes());
  const Tensor g = got.detach().cpu().to(DType::Float64),
               w = want.detach().cpu().to(DType::Float64);
  return ((g - w).abs() / (w.abs().clamp(1.0, std::nullopt))).amax().item();
}

// The recordings, replays and unrecorded runs between two readings of the counters.
void expect_counts(const CudaGraphCounters& from, const CudaGraphCounters& to,
                   int64_t recordings, int64_t replays, int64_t unrecorded,
                   const std::string& what) {
  EXPECT_EQ(to.recordings - from.recordings, recordings) << what;
  EXPECT_EQ(to.replays - from.replays, replays) << what;
  EXPECT_EQ(to.unrecorded_runs - from.unrecorded_runs, unrecorded) << what;
}

using Step = std::function<Tensor(const Tensor&, const Tensor&, const std::vector<Tensor>&,
                                  const std::vector<Tensor>&)>;

// Greedy decoding through `step` over `cache`: the prompt through forward_cached, then a step a
// position up to `end`; the tokens, and every step's logits.
std::pair<std::vector<int64_t>, Tensor> greedy_decode(const nn::GPT& m, const Tensor& prompt,
                                                      const Step& step, nn::KVCache cache,
                                                      int64_t end) {
  Tensor idx = m.forward_cached(prompt, cache).select(1, -1).argmax(-1, true);
  std::vector<Tensor> tokens{idx}, logits;
  for (int64_t p = prompt.size(1); p < end; ++p) {
    Tensor l = step(idx, full({1}, double(p), gpu(DType::Int64)), cache.k, cache.v);
    logits.push_back(l);
    idx = l.select(1, -1).argmax(-1, true);
    tokens.push_back(idx);
  }
  return {cat(tokens, 1).cpu().to_vector<int64_t>(), cat(logits, 1)};
}

class CudaGraphs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
    ASSERT_TRUE(compiler::nvrtc_available()) << "a GPU but no NVRTC: generated kernels cannot run";
  }
  CacheDir dir{kSharedCompilerCache};
  NoGradGuard no_grad;
};

Tensor block(const Tensor& a, const Tensor& w) {
  return ((matmul(a, w) + 1.0).relu().softmax(-1) * 2.0).sum({0});
}

TEST_F(CudaGraphs, ReplaysMatchEagerOnFreshInputs) {
  manual_seed(3);
  const Tensor w = randn({32, 48}, gpu());
  auto f = compile(block, graphed());
  const CudaGraphCounters c0 = cuda_graph_counters();
  for (int i = 0; i < 6; ++i) {
    const Tensor a = randn({20, 32}, gpu());
    EXPECT_LE(rel_err(f(a, w), block(a, w)), 1e-5) << "call " << i;
  }
  const CudaGraphCounters c1 = cuda_graph_counters();
  // The first call runs as in mode "default", the second records, the rest replay.
  expect_counts(c0, c1, 1, 4, 0, "six calls");
}

TEST_F(CudaGraphs, OutputsHeldAcrossReplaysKeepTheirValues) {
  manual_seed(4);
  const Tensor w = randn({16, 16}, gpu());
  auto f = compile(block, graphed());
  f(randn({8, 16}, gpu()), w);
  f(randn({8, 16}, gpu()), w);  // recorded
  std::vector<Tensor> inputs, outputs;
  const CudaGraphCounters c0 = cuda_graph_counters();
  for (int i = 0; i < 4; ++i) {
    inputs.push_back(randn({8, 16}, gpu()));
    outputs.push_back(f(inputs.back(), w));
  }
  const CudaGraphCounters c1 = cuda_graph_counters();
  for (int i = 0; i < 4; ++i)
    EXPECT_LE(rel_err(outputs[size_t(i)], block(inputs[size_t(i)], w)), 1e-5) << "output " << i;
  EXPECT_EQ(c1.replays - c0.replays, 4);
  // Each replay found the previous one's output still held and moved it out first.
  EXPECT_GE(c1.moved_outputs - c0.moved_outputs, 3);
}

TEST_F(CudaGraphs, WritesIntoInputsLandWhetherReadInPlaceOrCopiedIn) {
  manual_seed(5);
  auto step = [](const Tensor& state, const Tensor& x) {
    Tensor s = state;
    s.mul_(0.5).add_(x.tanh());
    return s.sum({1});
  };
  auto f = compile(step, graphed());
  // The same state tensor at every call: read in place.
  Tensor state = zeros({4, 8}, gpu()), want_state = zeros({4, 8}, gpu());
  for (int i = 0; i < 5; ++i) {
    const Tensor x = randn({4, 8}, gpu());
    const Tensor got = f(state, x), want = step(want_state, x);
    EXPECT_LE(rel_err(state, want_state), 1e-6) << "call " << i;
    EXPECT_LE(rel_err(got, want), 1e-5) << "call " << i;
  }
  // A new state tensor at every call: copied in, and its new contents copied back.
  auto g = compile(step, graphed());
  for (int i = 0; i < 5; ++i) {
    Tensor s = randn({4, 8}, gpu()), want_s = s.clone();
    const Tensor x = randn({4, 8}, gpu());
    const Tensor got = g(s, x), want = step(want_s, x);
    EXPECT_LE(rel_err(s, want_s), 1e-6) << "call " << i;
    EXPECT_LE(rel_err(got, want), 1e-5) << "call " << i;
  }
}

// A training step of the GPT in both modes, with and without dropout: under dropout the step
// draws its masks' ranges in a hoisted graph (one copy into memory the recordings read in
// place, capture/training.cpp), which a replay must see afresh each step, or its losses would
// leave the default mode's (which draws the same ranges).
void expect_training_steps_match_default_mode(double dropout) {
  EnableGradGuard grad;
  std::vector<std::vector<float>> losses(2);
  std::vector<std::vector<Tensor>> params(2);
  const CudaGraphCounters c0 = cuda_graph_counters();
  for (int mode = 0; mode < 2; ++mode) {
    manual_seed(6);
    auto m = std::make_shared<nn::GPT>(tiny_gpt(dropout));
    m->to(kGpu);
    optim::AdamW opt(optim::decay_groups(*m, 0.1), 1e-2);
    auto loss_fn = compile([m](const Tensor& a, const Tensor& b) { return m->loss(a, b); },
                           mode ? graphed() : compiler_opts());
    manual_seed(7);
    for (int i = 0; i < 5; ++i) {
      const Tensor x = randint(0, 11, {4, 8}, gpu(DType::Int64)),
                   y = randint(0, 11, {4, 8}, gpu(DType::Int64));
      Tensor loss = loss_fn(x, y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      losses[size_t(mode)].push_back(loss.detach().cpu().item<float>());
    }
    for (const Tensor& p : m->parameters()) params[size_t(mode)].push_back(p.detach().cpu());
  }
  const CudaGraphCounters c1 = cuda_graph_counters();
  for (size_t i = 0; i < losses[0].size(); ++i)
    EXPECT_NEAR(losses[1][i], losses[0][i], 1e-4 * std::abs(losses[0][i])) << "step " << i;
  // Not bit for bit: float32 atomics sum some grads in whatever order they land, in either
  // mode (AdamW then moves each parameter by about lr whatever the grad's size).
  for (size_t i = 0; i < params[0].size(); ++i)
    EXPECT_LE(rel_err(params[1][i], params[0][i]), 1e-4) << "parameter " << i;
  EXPECT_GE(c1.recordings - c0.recordings, 2);  // the forward graph and the backward graph
  EXPECT_GE(c1.replays - c0.replays, 6);
  EXPECT_GT(c1.side_steps - c0.side_steps, 0);  // the weights' grads beside the input grads
}

TEST_F(CudaGraphs, TrainingStepsMatchDefaultMode) { expect_training_steps_match_default_mode(0); }

TEST_F(CudaGraphs, TrainingStepsWithDropoutMatchDefaultMode) {
  expect_training_steps_match_default_mode(0.2);
}

// Weight grads recorded on a side branch, beside the input grads they hang off: every replay's
// grads equal the default mode's bit for bit (the same kernels in another order), on fresh
// inputs, the branch's products reading buffers the main chain frees and reuses meanwhile.
TEST_F(CudaGraphs, SideBranchGradsEqualDefaultModes) {
  EnableGradGuard grad;
  manual_seed(8);
  const Tensor a = (randn({96, 128}, gpu()) * 0.1).requires_grad_(true);
  const Tensor b = (randn({128, 160}, gpu()) * 0.1).requires_grad_(true);
  const Tensor c = (randn({160, 64}, gpu()) * 0.1).requires_grad_(true);
  const Tensor bias = (randn({160}, gpu()) * 0.1).requires_grad_(true);
  auto f = [bias](const Tensor& x, const Tensor& a, const Tensor& b, const Tensor& c) {
    Tensor h = x.matmul(a).relu();
    h = (h.matmul(b) + bias).tanh();  // the bias's grad: a sum over rows
    const Tensor y = h.matmul(c);
    return (y * y).sum();
  };
  auto plain = compile(f, compiler_opts());
  auto recorded = compile(f, graphed());
  const CudaGraphCounters c0 = cuda_graph_counters();
  for (int i = 0; i < 6; ++i) {
    const Tensor x = randn({512, 96}, gpu());
    std::vector<std::vector<Tensor>> grads(2);
    for (int mode = 0; mode < 2; ++mode) {
      for (const Tensor& p : {a, b, c, bias}) p.set_grad(Tensor());
      (mode ? recorded : plain)(x, a, b, c).backward();
      for (const Tensor& p : {a, b, c, bias}) grads[size_t(mode)].push_back(p.grad().cpu());
    }
    for (size_t k = 0; k < 4; ++k)
      EXPECT_EQ(rel_err(grads[1][k], grads[0][k]), 0.0) << "call " << i << ", weight " << k;
  }
  const CudaGraphCounters c1 = cuda_graph_counters();
  EXPECT_GE(c1.replays - c0.replays, 6);
  EXPECT_GE(c1.side_steps - c0.side_steps, 4);  // a product a weight, the bias's sum
}

// Two bfloat16 attentions under dropout (the tensor-core kernels): each one's keep flags drawn
// once (attention_keep) for the forward and the backward, and in a recording drawn on the side
// branch while the layer before runs. Every replay's loss and grads equal the default mode's
// bit for bit (the same kernels and masks), with fresh masks each call.
TEST_F(CudaGraphs, AttentionFlagsDrawnBesideEqualDefaultModes) {
  EnableGradGuard grad;
  manual_seed(12);
  const TensorOptions o = gpu(DType::BFloat16);
  std::vector<Tensor> leaves;
  for (int i = 0; i < 3; ++i) leaves.push_back(randn({2, 3, 80, 64}, o).requires_grad_(true));
  leaves.push_back((randn({64, 64}, o) * 0.1).requires_grad_(true));
  auto f = [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w) {
    const Tensor h = scaled_dot_product_attention(q, k, v, true, 0.3).matmul(w);
    const Tensor y = scaled_dot_product_attention(h, k, v, true, 0.3).to(DType::Float32);
    return (y * y).sum();
  };
  auto plain = compile(f, compiler_opts());
  auto recorded = compile(f, graphed());
  const CudaGraphCounters c0 = cuda_graph_counters();
  std::vector<float> losses;
  for (int i = 0; i < 6; ++i) {
    std::vector<std::vector<Tensor>> grads(2);
    std::vector<Tensor> loss(2);
    for (int mode = 0; mode < 2; ++mode) {
      for (const Tensor& p : leaves) p.set_grad(Tensor());
      manual_seed(uint64_t(100 + i));
      loss[size_t(mode)] = (mode ? recorded : plain)(leaves[0], leaves[1], leaves[2], leaves[3]);
      loss[size_t(mode)].backward();
      for (const Tensor& p : leaves) grads[size_t(mode)].push_back(p.grad().cpu());
    }
    EXPECT_TRUE(bits_equal(loss[1].detach().cpu(), loss[0].detach().cpu())) << "call " << i;
    for (size_t k = 0; k < leaves.size(); ++k)
      EXPECT_TRUE(bits_equal(grads[1][k], grads[0][k])) << "call " << i << ", leaf " << k;
    losses.push_back(loss[0].detach().cpu().item<float>());
  }
  EXPECT_NE(losses[0], losses[1]);  // fresh masks
  const CudaGraphCounters c1 = cuda_graph_counters();
  EXPECT_GE(c1.replays - c0.replays, 6);  // forward and backward, from the third call on
  // Both attentions' flags beside the forward, w's grad beside the backward.
  EXPECT_GE(c1.side_steps - c0.side_steps, 3);
}

TEST_F(CudaGraphs, GraphsThatDrawRandomNumbersRunUnrecordedWithFreshDraws) {
  nn::Dropout drop(0.5);
  drop.train();
  auto f = compile([&drop](const Tensor& x) { return drop.forward(x) * 3.0; }, graphed());
  const Tensor x = ones({64, 64}, gpu());
  const CudaGraphCounters c0 = cuda_graph_counters();
  std::vector<Tensor> outs;
  for (int i = 0; i < 4; ++i) outs.push_back(f(x));
  const CudaGraphCounters c1 = cuda_graph_counters();
  EXPECT_EQ(c1.recordings - c0.recordings, 0);
  EXPECT_GE(c1.unrecorded_runs - c0.unrecorded_runs, 3);
  for (int i = 1; i < 4; ++i)
    EXPECT_GT((outs[size_t(i)] - outs[0]).abs().amax().item(), 0.0) << "call " << i;
}

TEST_F(CudaGraphs, DecodeStepGivesEagerDecodingsTokens) {
  manual_seed(8);
  nn::GPTConfig c = tiny_gpt();
  c.block_size = 32;
  auto m = std::make_shared<nn::GPT>(c);
  m->to(kGpu);
  m->eval();
  const Tensor prompt = randint(0, 11, {1, 5}, gpu(DType::Int64));
  Step eager = [m](const Tensor& x, const Tensor& pos, const std::vector<Tensor>& k,
                   const std::vector<Tensor>& v) { return m->decode_step(x, pos, k, v); };
  auto step = compile(eager, graphed());
  auto decode = [&](const Step& s, nn::KVCache cache) {
    return greedy_decode(*m, prompt, s, std::move(cache), 31);
  };
  const CudaGraphCounters c0 = cuda_graph_counters();
  auto [want_tokens, want_logits] = decode(eager, m->preallocated_cache(1));
  const Step graphed_step = [&](const Tensor& x, const Tensor& pos, const std::vector<Tensor>& k,
                                const std::vector<Tensor>& v) { return step(x, pos, k, v); };
  const nn::KVCache first = m->preallocated_cache(1);
  auto [got_tokens, got_logits] = decode(graphed_step, first);
  const CudaGraphCounters c1 = cuda_graph_counters();
  EXPECT_EQ(got_tokens, want_tokens);
  EXPECT_LE(rel_err(got_logits, want_logits), 1e-4);
  EXPECT_EQ(step.stats().breaks, 0) << "the decode step is one graph";
  expect_counts(c0, c1, 1, 24, 0, "the first cache");
  // A new cache elsewhere (the first still held): its first call runs unrecorded, its second
  // is recorded, the rest replay.
  const CudaGraphCounters c2 = cuda_graph_counters();
  const nn::KVCache second = m->preallocated_cache(1);
  ASSERT_NE(second.k[0].data_ptr(), first.k[0].data_ptr());
  auto [again_tokens, again_logits] = decode(graphed_step, second);
  const CudaGraphCounters c3 = cuda_graph_counters();
  EXPECT_EQ(again_tokens, want_tokens);
  expect_counts(c2, c3, 1, 24, 1, "a second cache");
  // The first cache again: its recording replays from the first call.
  const CudaGraphCounters c4 = cuda_graph_counters();
  auto [third_tokens, third_logits] = decode(graphed_step, first);
  const CudaGraphCounters c5 = cuda_graph_counters();
  EXPECT_EQ(third_tokens, want_tokens);
  expect_counts(c4, c5, 0, 26, 0, "the first cache again");
}

// A bfloat16 GPT wider than 512 (so the gemv takes each layer's layer_norms, and the attention
// its cache writes: a layer in five kernels), decoded through its compiled step in both modes:
// the tokens are eager decoding's, and the logits within bfloat16's rounding of them (the
// compiled MLP takes the gelu of the unrounded biased product, where eager rounds it first).
TEST_F(CudaGraphs, FoldedBfloat16DecodeStepGivesEagersTokens) {
  manual_seed(9);
  nn::GPTConfig c = tiny_gpt();
  c.block_size = 32;
  c.n_embd = 640;
  c.n_head = 5;
  auto m = std::make_shared<nn::GPT>(c);
  m->to(kGpu);
  m->to(DType::BFloat16);
  m->eval();
  const Tensor prompt = randint(0, 11, {1, 5}, gpu(DType::Int64));
  Step eager = [m](const Tensor& x, const Tensor& pos, const std::vector<Tensor>& k,
                   const std::vector<Tensor>& v) { return m->decode_step(x, pos, k, v); };
  auto decode = [&](const Step& s) {
    return greedy_decode(*m, prompt, s, m->preallocated_cache(1), 31);
  };
  const auto [want_tokens, want_logits] = decode(eager);
  for (const bool graphs : {false, true}) {
    auto step = compile(eager, graphs ? graphed() : compiler_opts());
    const Step compiled = [&](const Tensor& x, const Tensor& pos, const std::vector<Tensor>& k,
                              const std::vector<Tensor>& v) { return step(x, pos, k, v); };
    const auto [tokens, logits] = decode(compiled);
    EXPECT_EQ(tokens, want_tokens) << (graphs ? "reduce-overhead" : "default mode");
    EXPECT_LE(rel_err(logits, want_logits), 0.05) << (graphs ? "reduce-overhead" : "default mode");
  }
}

// The pools' memory is reported while recordings live, and all of it goes back with the callable:
// the segment cache does not keep a reduce-overhead graph alive for callables to come.
TEST_F(CudaGraphs, PoolMemoryIsReportedAndGoesBackWithTheCallable) {
  const Tensor a = randn({128, 256}, gpu()), w = randn({256, 256}, gpu());
  // The libraries' own first-use memory (cuBLASLt's workspace) before counting.
  compile(block, compiler_opts())(a, w);
  cuda::synchronize();
  const size_t before = cuda::memory_stats(0).allocated_bytes;
  const int64_t pools_before = cuda_graph_counters().pool_bytes;
  {
    auto f = compile(block, graphed());
    for (int i = 0; i < 4; ++i) EXPECT_LE(rel_err(f(a, w), block(a, w)), 1e-5);
    EXPECT_GT(cuda_graph_counters().pool_bytes, pools_before) << "a recording keeps its pool";
  }
  cuda::synchronize();
  EXPECT_EQ(cuda_graph_counters().pool_bytes, pools_before);
  EXPECT_EQ(cuda::memory_stats(0).allocated_bytes, before);
  // A new callable of the same function records again (nothing was left in the cache).
  const CudaGraphCounters c0 = cuda_graph_counters();
  {
    auto f = compile(block, graphed());
    for (int i = 0; i < 3; ++i) f(a, w);
  }
  EXPECT_EQ(cuda_graph_counters().recordings - c0.recordings, 1);
}

}  // namespace
}  // namespace ember::test
