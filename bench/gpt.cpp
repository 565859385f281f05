// GPT rows: one training step (forward, backward, AdamW) and a forward pass, for nanoGPT's
// CPU recipe ("baby": 4 layers, 4 heads, 128 embd, block 64, batch 12) and a larger config
// (6 layers, 6 heads, 384 embd, block 256, batch 8).
#include "bench.h"
#include "ember/ember.h"
#include "ember/nn.h"
#include "ember/optim.h"

namespace ember::bench {

namespace {
struct Config {
  const char* name;
  int64_t n_layer, n_head, n_embd, block, batch;
};
const Config kConfigs[] = {{"baby", 4, 4, 128, 64, 12}, {"384", 6, 6, 384, 256, 8}};

nn::GPTConfig gpt_config(const Config& c) {
  nn::GPTConfig g;
  g.n_layer = c.n_layer;
  g.n_head = c.n_head;
  g.n_embd = c.n_embd;
  g.block_size = c.block;
  g.vocab_size = 65;
  g.dropout = 0.0;
  return g;
}
}  // namespace

EMBER_BENCH(gpt) {
  std::vector<Row> rows;
  for (const Config& c : kConfigs) {
    std::string train_name = std::string("gpt/train_step_") + c.name;
    std::string fwd_name = std::string("gpt/forward_") + c.name;
    if (!opt.wants(train_name) && !opt.wants(fwd_name)) continue;
    manual_seed(1);
    nn::GPT model(gpt_config(c));
    Tensor x = randint(0, 65, {c.batch, c.block}), y = randint(0, 65, {c.batch, c.block});
    const int repeat = opt.quick ? 2 : (c.n_embd > 200 ? 5 : 20);
    if (opt.wants(train_name)) {
      optim::AdamW adam(optim::decay_groups(model, 0.1), 1e-3, 0.9, 0.99);
      std::vector<Tensor> params = model.parameters();
      double ms = time_ms([&] {
        Tensor loss = model.loss(x, y);
        adam.zero_grad();
        loss.backward();
        optim::clip_grad_norm_(params, 1.0);
        adam.step();
      }, repeat, 2);
      Row r(train_name, ms);
      r.extra.push_back({"tokens_per_s", double(c.batch * c.block) / (ms / 1000)});
      rows.push_back(r);
    }
    if (opt.wants(fwd_name)) {
      NoGradGuard no_grad;
      model.eval();
      double ms = time_ms([&] { Tensor logits = model.forward(x); }, repeat, 2);
      rows.push_back(Row(fwd_name, ms));
    }
  }
  return rows;
}

}  // namespace ember::bench
