// The model zoo (include/ember/models.h) on its tiny configs with fixed seeds: output shapes,
// parameter names, a finite grad for every parameter, the compiled forward (backend "compiler",
// one graph, no break) against eager, and compiled training steps against eager ones.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "autograd/node.h"
#include "compiler/compiler_test_util.h"
#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/models.h"
#include "ember/optim.h"

namespace ember::test {
namespace {

using namespace ember::models;

// loss.backward() leaves a defined, finite grad on every parameter.
template <class M, class L>
void expect_finite_grads(M& m, L&& loss_of) {
  m.zero_grad();
  Tensor l = loss_of();
  ASSERT_TRUE(std::isfinite(l.item()));
  l.backward();
  for (auto& [n, p] : m.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << n;
    EXPECT_TRUE(std::isfinite(p.grad().to(DType::Float64).abs().sum().item())) << n;
  }
}

std::set<std::string> state_names(const nn::Module& m) {
  std::set<std::string> names;
  for (auto& [n, t] : m.state_dict()) names.insert(n);
  return names;
}

// Two models of one seed: compile(b) in no-grad mode (forward graphs only) follows a's eager
// forward on two calls (trace, then replay) in one graph, buffers (BatchNorm's running stats)
// included.
template <class M, class Cfg, class... A>
void expect_compiled_forward_follows_eager(const Cfg& cfg, bool training, const A&... args) {
  CacheDir dir(kSharedCompilerCache);
  manual_seed(1);
  auto a = std::make_shared<M>(cfg);
  manual_seed(1);
  auto b = std::make_shared<M>(cfg);
  a->train(training);
  b->train(training);
  auto cb = compile(b, compiler_opts());
  NoGradGuard no_grad;
  for (int call = 0; call < 2; ++call) {
    Tensor want = a->forward(args...);
    Tensor got = cb(args...);
    EXPECT_TRUE(close(got, want, 1e-4, 1e-5)) << "call " << call;
  }
  auto ba = a->named_buffers(), bb = b->named_buffers();
  ASSERT_EQ(ba.size(), bb.size());
  for (size_t i = 0; i < ba.size(); ++i)
    EXPECT_TRUE(close(bb[i].second, ba[i].second, 1e-4, 1e-5)) << ba[i].first;
  ExplainReport r = cb.explain();
  EXPECT_EQ(r.graph_count, 1);
  EXPECT_TRUE(r.breaks.empty());
  CompileStats st = cb.stats();
  EXPECT_EQ(st.traces, 1);
  EXPECT_EQ(st.replays, 1);
}

// Training steps (SGD with momentum) on one batch, model->loss(inputs...) compiled, follow eager
// ones: the losses within 1e-5 relative, the parameters and buffers after the last step within
// 1e-4 (absolute), and the loss falls.
template <class M, class Cfg, class... A>
void expect_compiled_training_follows_eager(const Cfg& cfg, int steps, const A&... inputs) {
  CacheDir dir(kSharedCompilerCache);
  manual_seed(3);
  auto eager = std::make_shared<M>(cfg);
  manual_seed(3);
  auto model = std::make_shared<M>(cfg);
  auto loss_fn = compile([m = model](const auto&... a) { return m->loss(a...); }, compiler_opts());
  optim::SGD opt_e({{eager->parameters()}}, 0.05, 0.9);
  optim::SGD opt_c({{model->parameters()}}, 0.05, 0.9);
  auto train = [&](auto&& loss_of, optim::SGD& opt) {
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) {
      opt.zero_grad();
      Tensor l = loss_of();
      l.backward();
      opt.step();
      losses.push_back(l.item());
    }
    return losses;
  };
  std::vector<double> le = train([&] { return eager->loss(inputs...); }, opt_e);
  std::vector<double> lc = train(
      [&] {
        Tensor l = loss_fn(inputs...);
        EXPECT_EQ(l.grad_fn()->name(), "CompiledGraphBackward");
        return l;
      },
      opt_c);
  for (size_t s = 0; s < le.size(); ++s) EXPECT_NEAR(lc[s], le[s], 1e-5 * le[s]) << "step " << s;
  EXPECT_LT(le.back(), le.front());  // it trains
  auto se = eager->state_dict(), sc = model->state_dict();
  ASSERT_EQ(se.size(), sc.size());
  for (size_t i = 0; i < se.size(); ++i)
    EXPECT_TRUE(close(sc[i].second, se[i].second, 0, 1e-4)) << se[i].first;
  CompileStats st = loss_fn.stats();
  EXPECT_EQ(st.traces, 1);
  EXPECT_EQ(st.breaks, 0);
}

// ---- models ----

TEST(Models, MLP) {
  manual_seed(0);
  MLP m;
  EXPECT_EQ(state_names(m), (std::set<std::string>{"layers.0.weight", "layers.0.bias",
                                                   "layers.1.weight", "layers.1.bias",
                                                   "layers.2.weight", "layers.2.bias"}));
  Tensor x = randn({5, 16}), y = randint(0, 4, {5});
  EXPECT_EQ(m.forward(x).sizes(), (Shape{5, 4}));
  expect_finite_grads(m, [&] { return m.loss(x, y); });
  expect_compiled_forward_follows_eager<MLP>(MLPConfig::tiny(), true, x);
}

TEST(Models, MLPCompiledTrainingFollowsEager) {
  manual_seed(5);
  expect_compiled_training_follows_eager<MLP>(MLPConfig::tiny(), 5, randn({8, 16}),
                                              randint(0, 4, {8}));
}

TEST(Models, ResNet) {
  manual_seed(0);
  ResNet m;
  auto names = state_names(m);
  for (const char* n : {"conv1.weight", "bn1.running_mean", "layer1.0.conv1.weight",
                        "layer1.0.bn2.num_batches_tracked", "layer2.0.downsample.0.weight",
                        "layer4.0.downsample.1.running_var", "fc.weight", "fc.bias"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_FALSE(names.count("layer1.0.downsample.0.weight"));
  EXPECT_FALSE(names.count("conv1.bias"));
  // ResNet-18's parameter count for CIFAR-10 (torchvision's with the 3x3 stem): 11,173,962.
  EXPECT_EQ(ResNet(ResNetConfig::resnet18()).num_parameters(), 11173962);
  Tensor x = randn({2, 3, 32, 32}), y = randint(0, 10, {2});
  EXPECT_EQ(m.forward(x).sizes(), (Shape{2, 10}));
  expect_finite_grads(m, [&] { return m.loss(x, y); });
  expect_compiled_forward_follows_eager<ResNet>(ResNetConfig::tiny(), true, x);
  expect_compiled_forward_follows_eager<ResNet>(ResNetConfig::tiny(), false, x);
  // The ImageNet stem (7x7 stride-2 conv, padded max pool): 32 -> 16 -> 8 before layer1.
  ResNetConfig imagenet = ResNetConfig::tiny();
  imagenet.imagenet_stem = true;
  ResNet mi(imagenet);
  EXPECT_EQ(mi.named_parameters().size(), m.named_parameters().size());
  EXPECT_EQ(mi.conv1->weight.sizes(), (Shape{8, 3, 7, 7}));
  EXPECT_EQ(mi.forward(x).sizes(), (Shape{2, 10}));
  expect_compiled_forward_follows_eager<ResNet>(imagenet, true, x);
  expect_compiled_forward_follows_eager<ResNet>(imagenet, false, x);
}

TEST(Models, ResNetCompiledTrainingFollowsEager) {
  manual_seed(5);
  expect_compiled_training_follows_eager<ResNet>(ResNetConfig::tiny(), 4, randn({4, 3, 16, 16}),
                                                 randint(0, 10, {4}));
}

TEST(Models, MobileNetV2) {
  manual_seed(0);
  MobileNetV2 m;
  auto names = state_names(m);
  for (const char* n : {"features.0.0.weight", "features.0.1.running_mean",
                        "features.1.conv.0.0.weight", "features.1.conv.1.weight",
                        "features.2.conv.0.0.weight", "features.2.conv.1.0.weight",
                        "features.2.conv.2.weight", "features.2.conv.3.running_var",
                        "features.6.0.weight", "classifier.1.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  // The depthwise conv of features.2: 8 * 6 channels, one input channel each.
  EXPECT_EQ(m.blocks[1]->depthwise->conv->weight.sizes(), (Shape{48, 1, 3, 3}));
  EXPECT_FALSE(m.blocks[1]->use_residual);
  EXPECT_TRUE(m.blocks[2]->use_residual);
  Tensor x = randn({2, 3, 16, 16}), y = randint(0, 10, {2});
  EXPECT_EQ(m.forward(x).sizes(), (Shape{2, 10}));
  expect_finite_grads(m, [&] { return m.loss(x, y); });
  expect_compiled_forward_follows_eager<MobileNetV2>(MobileNetV2Config::tiny(), true, x);
}

TEST(Models, ViT) {
  manual_seed(0);
  ViT m;
  EXPECT_EQ(m.pos_embed.sizes(), (Shape{1, 17, 32}));
  EXPECT_EQ(m.patch_embed->weight.sizes(), (Shape{32, 3, 4, 4}));
  Tensor x = randn({2, 3, 16, 16}), y = randint(0, 10, {2});
  EXPECT_EQ(m.forward(x).sizes(), (Shape{2, 10}));
  expect_finite_grads(m, [&] { return m.loss(x, y); });
  expect_compiled_forward_follows_eager<ViT>(ViTConfig::tiny(), true, x);
}

TEST(Models, BertIgnoresPaddedPositions) {
  manual_seed(0);
  Bert m;
  const int64_t B = 3, T = 8;
  Tensor ids = randint(0, 50, {B, T});
  Tensor lengths = from_vector<int64_t>({8, 5, 2}, {B}, DType::Int64);
  EXPECT_EQ(Bert::padding_mask(lengths, T).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 0, 0,  //
                                  0, 0, 0, 0, 0, 1, 1, 1,  //
                                  0, 0, 1, 1, 1, 1, 1, 1}));
  Tensor out = m.forward(ids, lengths);
  EXPECT_EQ(out.sizes(), (Shape{B, T, 50}));
  // Other tokens at the padded positions change nothing at the others.
  Tensor pad = Bert::padding_mask(lengths, T);
  Tensor ids2 = where(pad, full_like(ids, 7), ids);
  Tensor out2 = m.forward(ids2, lengths);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = lengths.to_vector<int64_t>()[size_t(b)];
    EXPECT_TRUE(close(out2.select(0, b).narrow(0, 0, n), out.select(0, b).narrow(0, 0, n), 1e-6,
                      1e-6))
        << "sequence " << b;
  }
  // Without the mask they would change.
  Tensor full_len = full({B}, double(T), DType::Int64);
  EXPECT_FALSE(close(m.forward(ids2, full_len).select(0, 1).narrow(0, 0, 5),
                     m.forward(ids, full_len).select(0, 1).narrow(0, 0, 5), 1e-6, 1e-6));
  Tensor targets = where(pad, full_like(ids, -100), ids);
  expect_finite_grads(m, [&] { return m.loss(ids, lengths, targets); });
  expect_compiled_forward_follows_eager<Bert>(BertConfig::tiny(), true, ids, lengths);
}

TEST(Models, LlamaWithGroupedQueryAttention) {
  manual_seed(0);
  Llama m;
  auto names = state_names(m);
  for (const char* n : {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                        "model.layers.1.self_attn.k_proj.weight",
                        "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
                        "model.layers.0.mlp.down_proj.weight",
                        "model.layers.0.input_layernorm.weight",
                        "model.layers.0.post_attention_layernorm.weight", "model.norm.weight",
                        "lm_head.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_EQ(names.size(), 1u + 9u * 2u + 2u);  // the rotary tables are not state
  // They are buffers kept out of the state dict: to() moves them, capture reads them.
  std::set<std::string> buffers;
  for (auto& [n, b] : m.named_buffers()) buffers.insert(n);
  EXPECT_EQ(buffers, (std::set<std::string>{"rope_cos", "rope_sin"}));
  // 4 query heads of 8 share 2 key/value heads.
  EXPECT_EQ(m.layers[0]->self_attn->k_proj->weight.sizes(), (Shape{16, 32}));
  EXPECT_EQ(m.layers[0]->self_attn->q_proj->weight.sizes(), (Shape{32, 32}));
  Tensor idx = randint(0, 64, {2, 12}), y = randint(0, 64, {2, 12});
  Tensor logits = m.forward(idx);
  EXPECT_EQ(logits.sizes(), (Shape{2, 12, 64}));
  // Causal: a later token changes nothing before it.
  Tensor idx2 = idx.clone();
  idx2.select(1, 11).fill_(3.0);
  EXPECT_TRUE(close(m.forward(idx2).narrow(1, 0, 11), logits.narrow(1, 0, 11), 1e-6, 1e-6));
  expect_finite_grads(m, [&] { return m.loss(idx, y); });
  expect_compiled_forward_follows_eager<Llama>(LlamaConfig::tiny(), true, idx);
}

TEST(Models, MixtureOfExpertsRoutesToTopTwo) {
  manual_seed(0);
  MoETransformer m;
  Tensor idx = randint(0, 64, {2, 8}), y = randint(0, 64, {2, 8});
  EXPECT_EQ(m.forward(idx).sizes(), (Shape{2, 8, 64}));
  // Two non-zero weights a token, summing to 1, on its two highest gate scores.
  Tensor x = randn({5, 32});
  const MoELayer& layer = *m.blocks[0]->moe;
  Tensor w = layer.routing_weights(x);
  EXPECT_TRUE(close(w.gt(0.0).sum({-1}), full({5}, 2.0, DType::Int64), 0, 0));
  EXPECT_TRUE(close(w.sum({-1}), ones({5}), 1e-6, 1e-6));
  Tensor top = layer.gate->forward(x).topk(2, -1).second;
  EXPECT_TRUE(close(w.gather(-1, top).gt(0.0).to(DType::Int64), ones({5, 2}, DType::Int64), 0, 0));
  // The layer is the routed sum of its experts.
  Tensor want = zeros({5, 32});
  for (size_t e = 0; e < layer.experts.size(); ++e) {
    const auto& ex = layer.experts[e];
    want = want + w.narrow(-1, int64_t(e), 1) *
                      ex.w2->forward(ex.w1->forward(x).silu() * ex.w3->forward(x));
  }
  EXPECT_TRUE(close(layer.forward(x), want, 1e-5, 1e-6));
  expect_finite_grads(m, [&] { return m.loss(idx, y); });
  expect_compiled_forward_follows_eager<MoETransformer>(MoEConfig::tiny(), true, idx);
}

TEST(Models, GRULanguageModel) {
  manual_seed(0);
  GRULM m;
  auto names = state_names(m);
  for (const char* n : {"embedding.weight", "cells.0.weight_ih", "cells.0.weight_hh",
                        "cells.1.bias_ih", "cells.1.bias_hh", "head.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  Tensor idx = randint(0, 32, {3, 6}), y = randint(0, 32, {3, 6});
  Tensor logits = m.forward(idx);
  EXPECT_EQ(logits.sizes(), (Shape{3, 6, 32}));
  // A recurrent model: the first step sees only the first token.
  EXPECT_TRUE(close(m.forward(idx.narrow(1, 0, 1)), logits.narrow(1, 0, 1), 1e-6, 1e-6));
  expect_finite_grads(m, [&] { return m.loss(idx, y); });
  expect_compiled_forward_follows_eager<GRULM>(GRULMConfig::tiny(), true, idx);
}

TEST(Models, UNet) {
  manual_seed(0);
  UNet m;
  auto names = state_names(m);
  for (const char* n : {"down.0.conv1.weight", "down.2.norm2.bias", "up.0.conv1.weight",
                        "up.1.conv2.weight", "out.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  // up.0 takes the 32 upsampled channels and the 16 of the skip.
  EXPECT_EQ(m.up[0]->conv1->weight.sizes(), (Shape{16, 48, 3, 3}));
  Tensor x = randn({2, 3, 16, 16}), t = randn({2, 2, 16, 16});
  EXPECT_EQ(m.forward(x).sizes(), (Shape{2, 2, 16, 16}));
  expect_finite_grads(m, [&] { return m.loss(x, t); });
  expect_compiled_forward_follows_eager<UNet>(UNetConfig::tiny(), true, x);
}

// The other families train compiled too.
TEST(Models, CompiledTrainingFollowsEager) {
  manual_seed(5);
  {
    SCOPED_TRACE("MobileNetV2");
    expect_compiled_training_follows_eager<MobileNetV2>(MobileNetV2Config::tiny(), 3,
                                                        randn({4, 3, 16, 16}), randint(0, 10, {4}));
  }
  {
    SCOPED_TRACE("ViT");
    expect_compiled_training_follows_eager<ViT>(ViTConfig::tiny(), 3, randn({2, 3, 16, 16}),
                                                randint(0, 10, {2}));
  }
  {
    SCOPED_TRACE("Bert");
    Tensor ids = randint(0, 50, {2, 8}), lengths = from_vector<int64_t>({8, 5}, {2}, DType::Int64);
    Tensor targets = where(Bert::padding_mask(lengths, 8), full_like(ids, -100), ids);
    expect_compiled_training_follows_eager<Bert>(BertConfig::tiny(), 3, ids, lengths, targets);
  }
  {
    SCOPED_TRACE("Llama");
    expect_compiled_training_follows_eager<Llama>(LlamaConfig::tiny(), 3, randint(0, 64, {2, 8}),
                                                  randint(0, 64, {2, 8}));
  }
  {
    SCOPED_TRACE("MoETransformer");
    expect_compiled_training_follows_eager<MoETransformer>(MoEConfig::tiny(), 3,
                                                           randint(0, 64, {2, 8}),
                                                           randint(0, 64, {2, 8}));
  }
  {
    SCOPED_TRACE("GRULM");
    expect_compiled_training_follows_eager<GRULM>(GRULMConfig::tiny(), 3, randint(0, 32, {2, 6}),
                                                  randint(0, 32, {2, 6}));
  }
  {
    SCOPED_TRACE("UNet");
    expect_compiled_training_follows_eager<UNet>(UNetConfig::tiny(), 3, randn({2, 3, 16, 16}),
                                                 randn({2, 2, 16, 16}));
  }
}

}  // namespace
}  // namespace ember::test
