// GPT rows: one training step (forward, backward, AdamW) and a forward pass, for nanoGPT's
// CPU recipe ("baby": 4 layers, 4 heads, 128 embd, block 64, batch 12) and a larger config
// (6 layers, 6 heads, 384 embd, block 256, batch 8).

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "bench.h"
#include "gpt_configs.h"
#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/nn.h"
#include "ember/optim.h"

namespace ember::bench {

namespace {
using Config = GptBenchConfig;
const Config kConfigs[] = {kBabyGpt, kGpt384};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The first call of the compiled forward (eval, no grad): trace, generate, build or load the
// kernels, run. With an empty cache directory this is the cold compile time.
double first_call_seconds(nn::GPT& model, const Tensor& x) {
  auto cm = compile([&model](const Tensor& t) { return model.forward(t); });
  const auto t0 = std::chrono::steady_clock::now();
  Tensor logits = cm(x);
  return seconds_since(t0);
}

const Config* find_config(const std::string& name) {
  for (const Config& c : kConfigs)
    if (name == c.name) return &c;
  return nullptr;
}

}  // namespace

int gpt_first_call_main(const std::string& config) {
  const Config* c = find_config(config);
  if (!c) return 2;
  manual_seed(1);
  nn::GPT model(gpt_config(*c));
  model.eval();
  NoGradGuard no_grad;
  Tensor x = randint(0, 65, {c->batch, c->block});
  std::printf("%.6f\n", first_call_seconds(model, x));
  return 0;
}

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
      // Cold compile into a fresh cache directory, then a warm start in a new process.
      char dir[] = "/tmp/ember-bench-cache-XXXXXX";
      const char* old = std::getenv("EMBER_CACHE_DIR");
      const std::string old_dir = old ? old : "";
      double cold = -1, warm = -1;
      if (::mkdtemp(dir)) {
        ::setenv("EMBER_CACHE_DIR", dir, 1);
        cold = first_call_seconds(model, x);
        warm = seconds_from_new_process(std::string("--gpt-first-call ") + c.name);
      }
      auto cm = compile([&model](const Tensor& t) { return model.forward(t); });
      cm(x);
      const auto [ms, cms] = time_pair_ms([&] { Tensor logits = model.forward(x); },
                                          [&] { Tensor logits = cm(x); }, repeat);
      if (old)
        ::setenv("EMBER_CACHE_DIR", old_dir.c_str(), 1);
      else
        ::unsetenv("EMBER_CACHE_DIR");
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      Row r(fwd_name, ms);
      r.compiled_ms = cms;
      r.extra.push_back({"cold_compile_s", cold});
      r.extra.push_back({"warm_start_s", warm});
      r.note = "eval forward, no grad; compiled = default backend (generated kernels)";
      rows.push_back(r);
    }
  }
  return rows;
}

}  // namespace ember::bench
