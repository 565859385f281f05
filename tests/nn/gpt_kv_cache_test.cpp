// GPT decoding with a key/value cache (GPT::forward_cached): a prompt then one token at a time
// gives the logits the whole-sequence forward gives at every position, chunks after the first
// too; generate (which caches) draws the same tokens as a loop over full forwards, past the
// block size (where the window slides) included; and misuse is an error that says what to do.
#include <gtest/gtest.h>

#include <cmath>

#include "ember/autograd.h"
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
}

}  // namespace
}  // namespace ember::nn
