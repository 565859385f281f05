// Capture rows: the cost of a cache hit (guard check + lookup) for a function of 10 tensor
// inputs, tracing time per captured op on a GPT forward, and a GPT forward replayed through
// the eager backend (which interprets the graph: no speedup expected, only the overhead).
#include <algorithm>

#include "bench.h"
#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/nn.h"

namespace ember::bench {

namespace {

Tensor sum10(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d, const Tensor& e,
             const Tensor& f, const Tensor& g, const Tensor& h, const Tensor& i, const Tensor& j) {
  return a + b + c + d + e + f + g + h + i + j;
}

nn::GPTConfig bench_gpt(bool quick) {
  nn::GPTConfig c;
  c.block_size = quick ? 16 : 64;
  c.vocab_size = 65;
  c.n_layer = quick ? 1 : 4;
  c.n_head = 4;
  c.n_embd = quick ? 32 : 128;
  return c;
}

}  // namespace

EMBER_BENCH(capture) {
  std::vector<Row> rows;
  NoGradGuard no_grad;

  if (opt.wants("capture/guard_hit_10_inputs")) {
    std::vector<Tensor> x;
    for (int k = 0; k < 10; ++k) x.push_back(ones({1}));
    auto f = compile(sum10);
    auto call_compiled = [&] {
      return f(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9]);
    };
    call_compiled();  // trace
    const int n = opt.quick ? 2000 : 100000;
    double eager = time_ms(
                       [&] {
                         for (int k = 0; k < n; ++k)
                           sum10(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9]);
                       },
                       opt.quick ? 3 : 7) /
                   n;
    double compiled = time_ms(
                          [&] {
                            for (int k = 0; k < n; ++k) call_compiled();
                          },
                          opt.quick ? 3 : 7) /
                      n;
    bool hit = true;
    double guard =
        time_ms(
            [&] {
              for (int k = 0; k < n; ++k)
                hit &= f.would_hit(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9]);
            },
            opt.quick ? 3 : 7) /
        n;
    Row r{"capture/guard_hit_10_inputs", eager};
    r.compiled_ms = compiled;
    r.extra = {{"us_guard_check", guard * 1000}, {"us_per_compiled_call", compiled * 1000}};
    r.note = hit ? "us_guard_check: flattening 10 arguments, guard check and cache lookup"
                 : "guard check missed: the measurement is wrong";
    rows.push_back(r);
  }

  if (opt.wants("capture/trace_per_op") || opt.wants("capture/gpt_forward_eager_backend")) {
    nn::GPTConfig c = bench_gpt(opt.quick);
    auto model = std::make_shared<nn::GPT>(c);
    model->eval();
    Tensor idx = randint(0, c.vocab_size, {opt.quick ? 2 : 8, c.block_size});
    double eager = time_ms([&] { model->forward(idx); }, opt.repeat);
    auto cm = compile(model);
    cm(idx);
    double replay = time_ms([&] { cm(idx); }, opt.repeat);
    int64_t ops = cm.explain().total_ops();
    if (opt.wants("capture/trace_per_op")) {
      // A fresh callable traces again (the segment cache already holds the graph, so nothing
      // compiles); stats().trace_seconds excludes running the captured graph.
      std::vector<double> per_op;
      double first = time_ms(
          [&] {
            auto fresh = compile([&](const Tensor& t) { return model->forward(t); });
            fresh(idx);
            per_op.push_back(fresh.stats().trace_seconds * 1e6 / double(ops));
          },
          opt.quick ? 3 : 10, 1);
      std::sort(per_op.begin(), per_op.end());
      Row r{"capture/trace_per_op", NAN};
      r.compiled_ms = first;
      r.extra = {{"us_per_op", per_op[per_op.size() / 2]}, {"ops", double(ops)}};
      r.note =
          "compiled_ms: first call of a new callable (trace + run); us_per_op: tracing "
          "time per captured op (median)";
      rows.push_back(r);
    }
    if (opt.wants("capture/gpt_forward_eager_backend")) {
      Row r{"capture/gpt_forward_eager_backend", eager};
      r.compiled_ms = replay;
      r.extra = {{"ops", double(ops)}};
      r.note = "backend=eager interprets the graph: the overhead of capture, not a speedup";
      rows.push_back(r);
    }
  }
  return rows;
}

}  // namespace ember::bench
