// GPT decoding with a key/value cache (GPT::forward_cached): a prompt then one token at a time
// gives the logits the whole-sequence forward gives at every position, chunks after the first
// too; generate (which caches) draws the same tokens as a loop over full forwards, past the
// block size (where the window slides) included; decode_step over preallocated caches (shapes
// that do not depend on the position) gives the same logits, compiled too with one trace for
// every position, and generate through it the same tokens; a prefill over preallocated caches
// (one graph when compiled) then decode steps give them too; and misuse is an error that says
// what to do.
#include <gtest/gtest.h>

#include <cmath>

#include "ember/autograd.h"
#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/nn.h"
#include "support/expect_error.h"

namespace ember::nn {
namespace {

GPTConfig small_config() {
  GPTConfig c;
  c.block_size = 16;
  c.vocab_size = 23;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.dropout = 0;
  return c;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// model->decode_step compiled: the step takes the caches as arguments and writes them in place.
auto compile_decode_step(const std::shared_ptr<GPT>& model, CompileOptions o = {}) {
  return compile([model](const Tensor& x, const Tensor& pos, const std::vector<Tensor>& k,
                         const std::vector<Tensor>& v) { return model->decode_step(x, pos, k, v); },
                 std::move(o));
}

TEST(GptKvCache, PromptThenTokensGiveTheFullForwardsLogits) {
  manual_seed(3);
  GPT model(small_config());
  model.eval();
  NoGradGuard no_grad;
  const Tensor idx = randint(0, 23, {3, 16}, DType::Int64);
  const Tensor full = model.forward(idx);  // [3, 16, 23]
  // A prompt of 5, then single tokens, then a chunk of 4 (queries after cached keys), then one.
  KVCache cache;
  std::vector<std::pair<int64_t, int64_t>> chunks = {{0, 5}, {5, 6}, {6, 7}, {7, 11}, {11, 16}};
  for (const auto& [a, b] : chunks) {
    const Tensor got = model.forward_cached(idx.slice(1, a, b), cache);
    EXPECT_EQ(cache.length, b);
    EXPECT_LT(max_abs_diff(got, full.slice(1, a, b)), 1e-5) << "positions " << a << ".." << b;
  }
}

TEST(GptKvCache, GenerateDrawsTheSameTokensAsFullForwards) {
  manual_seed(4);
  GPT model(small_config());
  const Tensor prompt = randint(0, 23, {2, 3}, DType::Int64);
  // 30 new tokens: the context passes the block size of 16, so the window slides too.
  for (int64_t top_k : {0, 5}) {
    manual_seed(11);
    const Tensor cached = model.generate(prompt, 30, 0.9, top_k);
    manual_seed(11);
    const Tensor plain = model.generate(prompt, 30, 0.9, top_k,
                                        [&](const Tensor& ctx) { return model.forward(ctx); });
    EXPECT_EQ(cached.sizes(), (Shape{2, 33}));
    EXPECT_EQ(cached.to_vector<int64_t>(), plain.to_vector<int64_t>()) << "top_k " << top_k;
  }
}

TEST(GptKvCache, DecodeStepsOverPreallocatedCachesGiveTheFullForwardsLogits) {
  manual_seed(5);
  auto model = std::make_shared<GPT>(small_config());
  model->eval();
  NoGradGuard no_grad;
  const Tensor idx = randint(0, 23, {2, 16}, DType::Int64);
  const Tensor full = model->forward(idx);
  // Eager and compiled: the compiled step takes the caches as arguments and writes them in
  // place; the position is a tensor, so every position replays one trace.
  CompileOptions o;
  o.name = "decode step";
  auto step = compile_decode_step(model, o);
  for (bool compiled : {false, true}) {
    KVCache cache = model->preallocated_cache(2);
    for (int64_t p = 0; p < 16; ++p) {
      const Tensor pos = full_like(zeros({1}, DType::Int64), double(p));
      const Tensor x = idx.slice(1, p, p + 1);
      const Tensor got = compiled ? step(x, pos, cache.k, cache.v)
                                  : model->decode_step(x, pos, cache.k, cache.v);
      ASSERT_EQ(got.sizes(), (Shape{2, 1, 23}));
      EXPECT_LT(max_abs_diff(got, full.slice(1, p, p + 1)), 1e-5)
          << (compiled ? "compiled" : "eager") << " position " << p;
    }
  }
  EXPECT_EQ(step.stats().traces, 1) << "one trace serves every position";
  EXPECT_EQ(step.stats().breaks, 0) << "the step is one graph (attention reads no view of a "
                                       "cache written in place)";
}

// Every layer builds the same slot mask from the position; the compiled step builds it once, and
// each layer's attention over its cache is one cached_attention.
TEST(GptKvCache, CompiledDecodeStepBuildsTheSlotMasksOnce) {
  manual_seed(7);
  auto model = std::make_shared<GPT>(small_config());
  model->eval();
  ASSERT_GE(model->config.n_layer, 2);
  NoGradGuard no_grad;
  auto step = compile_decode_step(model);
  KVCache cache = model->preallocated_cache(1);
  const Tensor x = zeros({1, 1}, DType::Int64), pos = zeros({1}, DType::Int64);
  step(x, pos, cache.k, cache.v);
  const ExplainReport r = step.explain();
  ASSERT_EQ(r.graphs.size(), 1u);
  auto count = [&](const std::string& op) {
    int n = 0;
    for (size_t at = r.graphs[0].find(" = " + op + "("); at != std::string::npos;
         at = r.graphs[0].find(" = " + op + "(", at + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(count("arange"), 1) << r.graphs[0];
  EXPECT_EQ(count("eq"), 1) << r.graphs[0];
  EXPECT_EQ(count("cached_attention"), int(model->config.n_layer)) << r.graphs[0];
  EXPECT_EQ(count("softmax"), 0) << r.graphs[0];
}

TEST(GptKvCache, GenerateThroughACompiledDecodeStepDrawsTheSameTokens) {
  manual_seed(6);
  auto model = std::make_shared<GPT>(small_config());
  model->eval();
  const Tensor prompt = randint(0, 23, {2, 3}, DType::Int64);
  auto step = compile_decode_step(model);
  GPT::DecodeFn decode = [&step](const Tensor& x, const Tensor& pos,
                                 const std::vector<Tensor>& k, const std::vector<Tensor>& v) {
    return step(x, pos, k, v);
  };
  // Greedy (top_k 1) and sampled; 30 new tokens pass the block size, where the window slides.
  for (int64_t top_k : {1, 5}) {
    manual_seed(12);
    const Tensor cached = model->generate(prompt, 30, 0.9, top_k);
    manual_seed(12);
    const Tensor stepped = model->generate(prompt, 30, 0.9, top_k, nullptr, decode);
    EXPECT_EQ(stepped.sizes(), (Shape{2, 33}));
    EXPECT_EQ(stepped.to_vector<int64_t>(), cached.to_vector<int64_t>()) << "top_k " << top_k;
  }
  EXPECT_EQ(step.stats().traces, 1);
}

TEST(GptKvCache, PrefillThenDecodeStepsGiveTheFullForwardsLogits) {
  manual_seed(7);
  auto model = std::make_shared<GPT>(small_config());
  model->eval();
  NoGradGuard no_grad;
  const Tensor idx = randint(0, 23, {2, 16}, DType::Int64);
  const Tensor full = model->forward(idx);
  using Caches = std::vector<Tensor>;
  auto prefill = compile([model](const Tensor& x, const Caches& k, const Caches& v) {
    return model->prefill(x, k, v);
  });
  auto step = compile_decode_step(model);
  for (bool compiled : {false, true}) {
    // Prompts of 5 and of the whole block (nothing left for the steps).
    for (int64_t t : {5, 16}) {
      KVCache cache = model->preallocated_cache(2);
      for (Tensor& c : cache.k) c.fill_(7.0);  // whatever the caches held before is overwritten
      const Tensor prompt = idx.slice(1, 0, t);
      const Tensor first = compiled ? prefill(prompt, cache.k, cache.v)
                                    : model->prefill(prompt, cache.k, cache.v);
      ASSERT_EQ(first.sizes(), (Shape{2, 1, 23}));
      EXPECT_LT(max_abs_diff(first, full.slice(1, t - 1, t)), 1e-5)
          << (compiled ? "compiled" : "eager") << " prompt of " << t;
      for (int64_t p = t; p < 16; ++p) {
        const Tensor pos = full_like(zeros({1}, DType::Int64), double(p));
        const Tensor x = idx.slice(1, p, p + 1).clone();
        const Tensor got = compiled ? step(x, pos, cache.k, cache.v)
                                    : model->decode_step(x, pos, cache.k, cache.v);
        EXPECT_LT(max_abs_diff(got, full.slice(1, p, p + 1)), 1e-5)
            << (compiled ? "compiled" : "eager") << " position " << p << " after " << t;
      }
    }
  }
  EXPECT_EQ(prefill.stats().breaks, 0) << "the prefill is one graph";
  // generate through both gives generate's own tokens.
  const Tensor prompt = idx.slice(1, 0, 4);
  GPT::DecodeFn decode = [&step](const Tensor& x, const Tensor& pos, const Caches& k,
                                 const Caches& v) { return step(x, pos, k, v); };
  GPT::PrefillFn first = [&prefill](const Tensor& x, const Caches& k, const Caches& v) {
    return prefill(x, k, v);
  };
  manual_seed(13);
  const Tensor cached = model->generate(prompt, 20, 0.8, 3);
  manual_seed(13);
  const Tensor both = model->generate(prompt, 20, 0.8, 3, nullptr, decode, first);
  EXPECT_EQ(both.to_vector<int64_t>(), cached.to_vector<int64_t>());
}

TEST(GptKvCache, MisuseIsAnErrorThatSaysWhatToDo) {
  GPT model(small_config());
  NoGradGuard no_grad;
  KVCache cache;
  test::expect_error([&] { model.forward_cached(zeros({1, 4}, DType::Int64), cache); },
                     "eval mode");
  model.eval();
  model.forward_cached(zeros({1, 12}, DType::Int64), cache);
  test::expect_error([&] { model.forward_cached(zeros({1, 5}, DType::Int64), cache); },
                     {"do not fit the block size 16", "start a new KVCache"});
  KVCache other;
  model.forward_cached(zeros({2, 3}, DType::Int64), other);
  test::expect_error([&] { model.forward_cached(zeros({1, 1}, DType::Int64), other); },
                     {"batch of 1", "start a new KVCache"});
  const KVCache pre = model.preallocated_cache(2);
  const Tensor at0 = zeros({1}, DType::Int64);
  test::expect_error([&] { model.decode_step(zeros({2, 2}, DType::Int64), at0, pre.k, pre.v); },
                     "one position");
  test::expect_error([&] { model.decode_step(zeros({1, 1}, DType::Int64), at0, pre.k, pre.v); },
                     {"caches", "preallocated_cache"});
  test::expect_error(
      [&] { model.decode_step(zeros({2, 1}, DType::Int64), zeros({1}), pre.k, pre.v); },
      "int64 tensor of one element");
}

}  // namespace
}  // namespace ember::nn
