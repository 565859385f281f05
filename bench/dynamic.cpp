// Dynamic-size rows: code shared over symbolic sizes against code built for one size, in one
// process, interleaved. "eager_ms" holds the static compiled time (dynamic = false) and
// "compiled_ms" the symbolic one: the same graph at the same size served by kernels fitted
// over the varying dim (families.h) after calls at two other sizes. Rows: the forward of the
// 384 config at T = 256 (the sequence length symbolic), the baby training step (loss and
// backward; the batch symbolic), and sampling 200 tokens from a 1-token prompt with the
// forward eager against compiled (the context growing to block_size, then sliding).
#include "bench.h"
#include "gpt_configs.h"
#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/nn.h"

namespace ember::bench {

EMBER_BENCH(dynamic) {
  std::vector<Row> rows;
  const int quick_repeat = opt.quick ? 2 : 0;
  if (opt.wants("dynamic/gpt_forward_384_t256")) {
    const GptBenchConfig& c = kGpt384;
    manual_seed(1);
    auto model = std::make_shared<nn::GPT>(gpt_config(c));
    model->eval();
    NoGradGuard no_grad;
    CompileOptions st, dy;
    st.dynamic = false;
    dy.dynamic = true;
    auto fs = compile(model, st), fd = compile(model, dy);
    const Tensor x = randint(0, 65, {c.batch, c.block});
    for (int64_t t : {c.block - 2, c.block - 1}) fd(randint(0, 65, {c.batch, t}));
    fs(x);
    fd(x);
    const auto [st_ms, dy_ms] = time_pair_ms([&] { fs(x); }, [&] { fd(x); },
                                             quick_repeat ? quick_repeat : 5);
    Row r("dynamic/gpt_forward_384_t256", st_ms);
    r.compiled_ms = dy_ms;
    r.extra.push_back({"symbolic_over_static", dy_ms / st_ms});
    r.extra.push_back({"shared_graphs", double(fd.stats().shared_compiles)});
    r.note = "eager_ms: static compiled; compiled_ms: shared over T";
    rows.push_back(r);
  }
  if (opt.wants("dynamic/gpt_train_step_baby")) {
    const GptBenchConfig& c = kBabyGpt;
    manual_seed(1);
    auto model = std::make_shared<nn::GPT>(gpt_config(c));
    CompileOptions st, dy;
    st.dynamic = false;
    dy.dynamic = true;
    auto loss = [m = model](const Tensor& a, const Tensor& b) { return m->loss(a, b); };
    auto fs = compile(loss, st), fd = compile(loss, dy);
    auto batch = [&](int64_t b) { return randint(0, 65, {b, c.block}); };
    for (int64_t b : {c.batch - 2, c.batch - 1}) fd(batch(b), batch(b)).backward();
    const Tensor x = batch(c.batch), y = batch(c.batch);
    fs(x, y).backward();
    fd(x, y).backward();
    auto step = [&](auto& f) {
      model->zero_grad();
      f(x, y).backward();
    };
    const auto [st_ms, dy_ms] = time_pair_ms([&] { step(fs); }, [&] { step(fd); },
                                             quick_repeat ? quick_repeat : 20);
    Row r("dynamic/gpt_train_step_baby", st_ms);
    r.compiled_ms = dy_ms;
    r.extra.push_back({"symbolic_over_static", dy_ms / st_ms});
    r.extra.push_back({"shared_graphs", double(fd.stats().shared_compiles)});
    r.note = "loss and backward; eager_ms: static compiled; compiled_ms: shared over the batch";
    rows.push_back(r);
  }
  if (opt.wants("dynamic/sample_baby")) {
    const GptBenchConfig& c = kBabyGpt;
    manual_seed(1);
    auto model = std::make_shared<nn::GPT>(gpt_config(c));
    model->eval();
    auto f = compile(model);
    const int64_t tokens = opt.quick ? 20 : 200;
    const Tensor prompt = randint(0, 65, {1, 1});
    // Eager decodes with the key/value cache; `full` runs the eager forward over the whole
    // context at every token instead (what the compiled forward does).
    auto sample = [&](bool compiled, bool full = false) {
      manual_seed(7);
      std::function<Tensor(const Tensor&)> fn;
      if (compiled) fn = [&f](const Tensor& t) { return f(t); };
      if (full) fn = [&model](const Tensor& t) { return model->forward(t); };
      return model->generate(prompt, tokens, 1.0, 0, fn);
    };
    // The first compiled run traces every length once (and builds); then both are timed.
    const Tensor first = sample(true);
    const Tensor same = sample(false);
    const auto [eager_ms, compiled_ms] =
        time_pair_ms([&] { sample(false); }, [&] { sample(true); }, 1, opt.quick ? 1 : 3);
    const auto [cached_ms, full_ms] = time_pair_ms([&] { sample(false); },
                                                   [&] { sample(false, true); }, 1,
                                                   opt.quick ? 1 : 3);
    Row r("dynamic/sample_baby", eager_ms);
    r.compiled_ms = compiled_ms;
    r.extra.push_back({"eager_tokens_per_s", double(tokens) / (eager_ms / 1000)});
    r.extra.push_back({"compiled_tokens_per_s", double(tokens) / (compiled_ms / 1000)});
    r.extra.push_back({"eager_full_forward_tokens_per_s", double(tokens) / (full_ms / 1000)});
    r.extra.push_back({"cache_over_full_forward", cached_ms / full_ms});
    r.extra.push_back({"graphs_traced", double(f.stats().traces)});
    r.extra.push_back({"own_builds", double(f.stats().compiles - f.stats().shared_compiles -
                                            f.stats().deferred_compiles)});
    r.extra.push_back({"same_tokens", first.to_vector<int64_t>() == same.to_vector<int64_t>() ? 1.0 : 0.0});
    r.note = "200 tokens from a 1-token prompt, block 64: the context grows, then slides; eager "
             "decodes with the key/value cache";
    rows.push_back(r);
  }
  return rows;
}

}  // namespace ember::bench
