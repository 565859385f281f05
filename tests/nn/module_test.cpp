// Modules: names, modes, state dicts and their error reports; the GPT's structure.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "ember/ember.h"
#include "ember/nn.h"

namespace ember::nn {
namespace {

GPTConfig tiny_config() {
  GPTConfig c;
  c.block_size = 8;
  c.vocab_size = 11;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

TEST(Module, GPTStateDictHasNanoGPTNames) {
  GPT m(tiny_config());
  std::set<std::string> names;
  for (auto& [n, t] : m.state_dict()) names.insert(n);
  for (const char* n :
       {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
        "transformer.h.0.ln_1.bias", "transformer.h.0.attn.c_attn.weight",
        "transformer.h.0.attn.c_attn.bias", "transformer.h.0.attn.c_proj.weight",
        "transformer.h.1.mlp.c_fc.weight", "transformer.h.1.mlp.c_proj.bias",
        "transformer.ln_f.weight", "lm_head.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_EQ(names.size(), 2u + 12u * 2u + 2u + 1u);
}

TEST(Module, TiedWeightIsOneParameter) {
  GPT m(tiny_config());
  auto sd = m.state_dict();
  Tensor wte, head;
  for (auto& [n, t] : sd) {
    if (n == "transformer.wte.weight") wte = t;
    if (n == "lm_head.weight") head = t;
  }
  EXPECT_EQ(wte.impl(), head.impl());
  // parameters() deduplicates the tied tensor
  int64_t total = 0;
  for (auto& [n, t] : sd) total += t.numel();
  EXPECT_EQ(m.num_parameters(), total - head.numel());
}

TEST(Module, GPT2InitStatistics) {
  GPTConfig c = tiny_config();
  c.n_embd = 64;
  c.n_head = 4;
  GPT m(c);
  auto stdev = [](const Tensor& t) { return t.to(DType::Float64).std().item(); };
  EXPECT_NEAR(stdev(m.wte->weight), 0.02, 0.004);
  EXPECT_NEAR(stdev(m.h[0]->attn->c_proj->weight), 0.02 / std::sqrt(2.0 * c.n_layer), 0.003);
  EXPECT_EQ(m.h[0]->attn->c_attn->bias.abs().sum().item(), 0.0);
  EXPECT_EQ(m.ln_f->weight.sum().item(), double(c.n_embd));
}

TEST(Module, TrainEvalPropagates) {
  GPT m(tiny_config());
  m.eval();
  for (auto& [n, mod] : m.named_modules()) EXPECT_FALSE(mod->is_training()) << n;
  m.train();
  for (auto& [n, mod] : m.named_modules()) EXPECT_TRUE(mod->is_training()) << n;
}

TEST(Module, LoadStateDictRoundTripAndPrefix) {
  GPT a(tiny_config()), b(tiny_config());
  StateDict sd;
  for (auto& [n, t] : a.state_dict()) sd.emplace_back("_orig_mod." + n, t.clone());
  LoadReport r = b.load_state_dict(sd);
  EXPECT_TRUE(r.ok()) << r.str();
  auto sa = a.state_dict(), sb = b.state_dict();
  for (size_t i = 0; i < sa.size(); ++i)
    EXPECT_EQ(sa[i].second.to_vector<float>(), sb[i].second.to_vector<float>()) << sa[i].first;
}

TEST(Module, StrictLoadRejectsAndChangesNothing) {
  GPT a(tiny_config()), b(tiny_config());
  auto before = b.state_dict()[0].second.to_vector<float>();
  StateDict sd = a.state_dict();
  sd.pop_back();                                        // one missing
  sd.emplace_back("extra.weight", zeros({2}));          // one unexpected
  sd[0].second = zeros({3, 3});                         // one mis-shaped
  try {
    b.load_state_dict(sd, true);
    FAIL() << "strict load accepted a mismatching dict";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
    EXPECT_NE(msg.find("extra.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("transformer.wte.weight"), std::string::npos) << msg;
  }
  EXPECT_EQ(b.state_dict()[0].second.to_vector<float>(), before);
  LoadReport r = b.load_state_dict(sd, false);
  EXPECT_EQ(r.missing.size(), 1u);
  EXPECT_EQ(r.unexpected.size(), 1u);
  EXPECT_EQ(r.mismatched.size(), 1u);
}

TEST(GPT, ForwardShapesAndErrors) {
  GPT m(tiny_config());
  Tensor idx = randint(0, 11, {3, 5});
  Tensor logits = m.forward(idx);
  EXPECT_EQ(logits.sizes(), (Shape{3, 5, 11}));
  EXPECT_THROW(m.forward(randint(0, 11, {1, 9})), Error);   // longer than block_size
  EXPECT_THROW(m.forward(randn({2, 3})), Error);            // not token ids
  EXPECT_THROW(m.forward(randint(0, 12, {1, 4}).add_(11)), Error);  // ids out of vocab
}

TEST(GPT, LossStartsNearUniformAndBackwardReachesEveryParameter) {
  GPT m(tiny_config());
  Tensor idx = randint(0, 11, {4, 8}), tgt = randint(0, 11, {4, 8});
  Tensor loss = m.loss(idx, tgt);
  EXPECT_NEAR(loss.item(), std::log(11.0), 0.3);
  loss.backward();
  for (auto& [n, p] : m.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << n;
    EXPECT_GT(p.grad().abs().sum().item(), 0.0) << n;
  }
}

TEST(GPT, GenerateAppendsTokensInVocab) {
  GPT m(tiny_config());
  manual_seed(3);
  Tensor out = m.generate(zeros({2, 1}, DType::Int64), 12, 0.8, 5);
  EXPECT_EQ(out.sizes(), (Shape{2, 13}));
  for (int64_t v : out.to_vector<int64_t>()) {
    EXPECT_GE(v, 0);
    EXPECT_LT(v, 11);
  }
  EXPECT_TRUE(m.is_training());  // restored
}

}  // namespace
}  // namespace ember::nn
