// The GPT under compile(backend = eager): forward and full training steps equal eager bit for
// bit (dropout included, from the same seed), and explain reports one graph with no breaks.
#include "capture/capture_test_util.h"
#include "ember/nn.h"
#include "ember/optim.h"

namespace ember::test {
namespace {

// Two models with the same weights.
std::pair<std::shared_ptr<nn::GPT>, std::shared_ptr<nn::GPT>> twin_models(double dropout) {
  manual_seed(3);
  auto a = std::make_shared<nn::GPT>(tiny_gpt(dropout));
  manual_seed(3);
  auto b = std::make_shared<nn::GPT>(tiny_gpt(dropout));
  return {a, b};
}

class GPTCapture : public ::testing::Test {
 protected:
  void SetUp() override { reset_compile_caches(); }
};

TEST_F(GPTCapture, ForwardEqualsEagerBitForBit) {
  auto [eager, model] = twin_models(0.0);
  auto cm = compile(model, eager_backend());
  Tensor idx = randint(0, 11, {2, 8});
  NoGradGuard ng;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(bits_equal(cm(idx), eager->forward(idx)));
  EXPECT_EQ(cm.stats().traces, 1);
  EXPECT_EQ(cm.stats().replays, 2);
}

TEST_F(GPTCapture, ExplainShowsOneGraphNoBreaksAndTheOpCount) {
  auto model = std::make_shared<nn::GPT>(tiny_gpt());
  Tensor idx = randint(0, 11, {2, 8});
  ExplainReport r = explain([&](const Tensor& x) { return model->forward(x); }, idx);
  EXPECT_EQ(r.graph_count, 1);
  EXPECT_TRUE(r.breaks.empty());
  ASSERT_EQ(r.ops_per_graph.size(), 1u);
  EXPECT_GT(r.ops_per_graph[0], 20);
  std::string text = r.str();
  EXPECT_NE(text.find("1 graph, 0 graph breaks, " + std::to_string(r.ops_per_graph[0]) + " ops"),
            std::string::npos)
      << text;
}

// loss = model.loss(x, y) under compile, backward through the interpreted graph, AdamW step.
void train_and_compare(double dropout) {
  auto [eager, model] = twin_models(dropout);
  auto loss_fn = compile([m = model](const Tensor& x, const Tensor& y) { return m->loss(x, y); },
                         eager_backend());
  optim::AdamW opt_e(optim::decay_groups(*eager, 0.1), 1e-2);
  optim::AdamW opt_c(optim::decay_groups(*model, 0.1), 1e-2);
  manual_seed(5);
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int s = 0; s < 3; ++s) batches.push_back({randint(0, 11, {2, 8}), randint(0, 11, {2, 8})});
  std::vector<Tensor> eager_losses;
  manual_seed(9);
  for (auto& [x, y] : batches) {
    opt_e.zero_grad();
    Tensor l = eager->loss(x, y);
    l.backward();
    opt_e.step();
    eager_losses.push_back(l.detach());
  }
  manual_seed(9);
  for (size_t s = 0; s < batches.size(); ++s) {
    opt_c.zero_grad();
    Tensor l = loss_fn(batches[s].first, batches[s].second);
    l.backward();
    opt_c.step();
    EXPECT_TRUE(bits_equal(l, eager_losses[s])) << "step " << s;
  }
  auto pe = eager->named_parameters(), pc = model->named_parameters();
  ASSERT_EQ(pe.size(), pc.size());
  for (size_t i = 0; i < pe.size(); ++i)
    EXPECT_TRUE(bits_equal(pe[i].second, pc[i].second)) << pe[i].first;
  CompileStats s = loss_fn.stats();
  EXPECT_EQ(s.traces, 1);
  EXPECT_EQ(s.replays, 2);
  EXPECT_EQ(s.breaks, 0);
}

TEST_F(GPTCapture, TrainingStepsEqualEagerBitForBit) {
  train_and_compare(0.0);
}

TEST_F(GPTCapture, TrainingStepsWithDropoutEqualEagerFromTheSameSeed) {
  train_and_compare(0.2);
}

TEST_F(GPTCapture, EvalAfterTrainRecompilesOnce) {
  auto model = std::make_shared<nn::GPT>(tiny_gpt(0.1));
  auto cm = compile(model, eager_backend());
  Tensor idx = randint(0, 11, {1, 8});
  NoGradGuard ng;
  cm(idx);
  cm.eval();
  Tensor a = cm(idx), b = cm(idx);
  EXPECT_TRUE(bits_equal(a, b));  // no dropout in eval
  EXPECT_TRUE(bits_equal(a, model->forward(idx)));
  EXPECT_EQ(cm.stats().recompiles, 1);
}

}  // namespace
}  // namespace ember::test
