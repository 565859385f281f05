// Training compile rows: one GPT training step (loss, backward, grad clipping, AdamW) eager
// against the same step with model.loss compiled by backend "compiler" (one forward and one
// backward graph of generated code) and AdamW's step compiled (AdamW::set_compiled), in one
// process from the same weights. Extra fields: compile_s (the first compiled call: trace, joint graph, partition, both
// graphs built by the C++ compiler or found in its disk cache), and the allocator's peak bytes
// during one step of each.
#include "bench.h"
#include "gpt_configs.h"
#include "core/allocator.h"
#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/nn.h"
#include "ember/optim.h"

namespace ember::bench {

namespace {

using Config = GptBenchConfig;
// The gpt rows' shapes with dropout 0, and the baby recipe's dropout 0.2 too, since the
// compiled step then hoists the masks.
const Config kConfigs[] = {kBabyGpt, {"baby_dropout", 4, 4, 128, 64, 12, 0.2}, kGpt384};

// Peak allocated bytes over one call of fn, above what was allocated before it.
double peak_bytes(const std::function<void()>& fn) {
  cpu_reset_peak();
  const size_t before = cpu_allocator_stats().allocated_bytes;
  fn();
  return double(cpu_allocator_stats().peak_allocated_bytes - before);
}

}  // namespace

EMBER_BENCH(training) {
  std::vector<Row> rows;
  for (const Config& c : kConfigs) {
    const std::string name = std::string("compiler/gpt_train_step_") + c.name;
    if (!opt.wants(name)) continue;
    manual_seed(1);
    auto model = std::make_shared<nn::GPT>(gpt_config(c));
    Tensor x = randint(0, 65, {c.batch, c.block}), y = randint(0, 65, {c.batch, c.block});
    optim::AdamW adam(optim::decay_groups(*model, 0.1), 1e-3, 0.9, 0.99);
    optim::AdamW adam_compiled(optim::decay_groups(*model, 0.1), 1e-3, 0.9, 0.99);
    adam_compiled.set_compiled(true);
    const std::vector<Tensor> params = model->parameters();
    CompileOptions o;
    o.backend = "compiler";
    auto loss_fn = compile([m = model](const Tensor& a, const Tensor& b) { return m->loss(a, b); }, o);
    auto step = [&](bool compiled) {
      Tensor loss = compiled ? loss_fn(x, y) : model->loss(x, y);
      optim::AdamW& opt_ = compiled ? adam_compiled : adam;
      opt_.zero_grad();
      loss.backward();
      optim::clip_grad_norm_(params, 1.0);
      opt_.step();
    };
    auto t0 = std::chrono::steady_clock::now();
    step(true);
    const double compile_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int repeat = opt.quick ? 2 : (c.n_embd > 200 ? 5 : 20);
    // Interleaved, so both see the same machine load.
    const auto [eager_ms, compiled_ms] =
        time_pair_ms([&] { step(false); }, [&] { step(true); }, repeat);
    const double eager_peak = peak_bytes([&] { step(false); });
    const double compiled_peak = peak_bytes([&] { step(true); });
    Row r(name, eager_ms);
    r.compiled_ms = compiled_ms;
    r.extra.push_back({"compile_s", compile_s});
    r.extra.push_back({"eager_peak_mb", eager_peak / 1e6});
    r.extra.push_back({"compiled_peak_mb", compiled_peak / 1e6});
    r.extra.push_back({"tokens_per_s", double(c.batch * c.block) / (compiled_ms / 1000)});
    rows.push_back(r);
  }

  // AdamW's step alone over the baby GPT's parameters (random grads): eager against
  // AdamW::set_compiled, two optimizers over the same parameters.
  if (opt.wants("compiler/adamw_step_baby")) {
    manual_seed(1);
    auto model = std::make_shared<nn::GPT>(gpt_config(kConfigs[0]));
    for (const Tensor& p : model->parameters()) p.set_grad(randn(p.sizes()) * 1e-2);
    optim::AdamW eager(optim::decay_groups(*model, 0.1), 1e-3, 0.9, 0.99);
    optim::AdamW compiled(optim::decay_groups(*model, 0.1), 1e-3, 0.9, 0.99);
    compiled.set_compiled(true);
    compiled.step();  // trace and compile
    const int repeat = opt.quick ? 5 : 200;
    Row r("compiler/adamw_step_baby", time_ms([&] { eager.step(); }, repeat, 5));
    r.compiled_ms = time_ms([&] { compiled.step(); }, repeat, 5);
    r.extra.push_back({"parameters", double(model->parameters().size())});
    rows.push_back(r);
  }
  return rows;
}

}  // namespace ember::bench
