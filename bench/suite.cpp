// The model suite (`ember-bench --filter suite/`): each model of the zoo (include/ember/
// models.h) and the GPT, inference and a training step with AdamW, eager against compiled
// (backend "compiler"), as torch.compile's paper tabulates its benchmark families. Per row:
// both times and the speedup; graphs, graph breaks and ops captured (explain()); the first
// compiled call with an empty kernel cache (cold_s) and, in a new callable after the
// process-wide caches were dropped, with the disk cache (warm_s); the allocator's peak bytes
// over one call of each; and the largest difference between the compiled and eager results
// (the output, or the loss before the first step), from a replayed call. The summary rows give the geometric mean speedups
// and the share of models captured in one graph without breaks. EMBER_SUITE_DEVICE=cuda (or
// cuda:N) runs the models on that GPU: weights and inputs moved there, each timed call
// synchronized, peaks from the GPU allocator (compiled graphs of GPU tensors run their eager
// CUDA kernels until the CUDA compiler exists, so speedups there measure capture alone).
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "bench.h"
#include "gpt_configs.h"
#include "compiler/toolchain.h"
#include "core/allocator.h"
#include "ember/compile.h"
#include "ember/cuda.h"
#include "ember/ember.h"
#include "ember/models.h"
#include "ember/optim.h"

namespace ember::bench {

namespace {

using Args = std::vector<Tensor>;

struct Case {
  std::string name;
  std::function<std::shared_ptr<nn::Module>()> make;
  std::function<Args()> inputs;   // forward inputs
  std::function<Args()> targets;  // what the loss takes after the inputs
  std::function<Tensor(nn::Module&, const Args&)> forward;
  std::function<Tensor(nn::Module&, const Args&)> loss;  // inputs then targets
};

template <class M>
M& as(nn::Module& m) {
  return static_cast<M&>(m);
}

// A case for a model M whose forward takes one tensor and whose loss takes it and one target.
template <class M, class Config>
Case simple(std::string name, Config config, std::function<Tensor()> input,
            std::function<Tensor()> target) {
  Case c;
  c.name = std::move(name);
  c.make = [config] { return std::make_shared<M>(config); };
  c.inputs = [input] { return Args{input()}; };
  c.targets = [target] { return Args{target()}; };
  c.forward = [](nn::Module& m, const Args& a) { return as<M>(m).forward(a[0]); };
  c.loss = [](nn::Module& m, const Args& a) { return as<M>(m).loss(a[0], a[1]); };
  return c;
}

std::vector<Case> cases() {
  using namespace models;
  std::vector<Case> out;
  out.push_back(simple<MLP>("mlp", MLPConfig::tiny(), [] { return randn({64, 16}); },
                            [] { return randint(0, 4, {64}); }));
  out.push_back(simple<ResNet>("resnet", ResNetConfig::tiny(), [] { return randn({8, 3, 32, 32}); },
                               [] { return randint(0, 10, {8}); }));
  out.push_back(simple<MobileNetV2>("mobilenetv2", MobileNetV2Config::tiny(),
                                    [] { return randn({8, 3, 32, 32}); },
                                    [] { return randint(0, 10, {8}); }));
  out.push_back(simple<ViT>("vit", ViTConfig::tiny(), [] { return randn({8, 3, 16, 16}); },
                            [] { return randint(0, 10, {8}); }));
  {
    Case c;
    c.name = "bert";
    c.make = [] { return std::make_shared<Bert>(BertConfig::tiny()); };
    c.inputs = [] {
      return Args{randint(0, 50, {8, 16}),
                  from_vector<int64_t>({16, 12, 9, 16, 3, 16, 8, 14}, {8}, DType::Int64)};
    };
    c.targets = [] { return Args{randint(0, 50, {8, 16})}; };
    c.forward = [](nn::Module& m, const Args& a) { return as<Bert>(m).forward(a[0], a[1]); };
    c.loss = [](nn::Module& m, const Args& a) { return as<Bert>(m).loss(a[0], a[1], a[2]); };
    out.push_back(c);
  }
  out.push_back(simple<Llama>("llama", LlamaConfig::tiny(), [] { return randint(0, 64, {8, 16}); },
                              [] { return randint(0, 64, {8, 16}); }));
  out.push_back(simple<MoETransformer>("moe", MoEConfig::tiny(),
                                       [] { return randint(0, 64, {8, 16}); },
                                       [] { return randint(0, 64, {8, 16}); }));
  out.push_back(simple<GRULM>("gru_lm", GRULMConfig::tiny(), [] { return randint(0, 32, {8, 12}); },
                              [] { return randint(0, 32, {8, 12}); }));
  out.push_back(simple<UNet>("unet", UNetConfig::tiny(), [] { return randn({4, 3, 32, 32}); },
                             [] { return randn({4, 2, 32, 32}); }));
  out.push_back(simple<nn::GPT>("gpt", gpt_config(kBabyGpt),
                                [] { return randint(0, 65, {kBabyGpt.batch, kBabyGpt.block}); },
                                [] { return randint(0, 65, {kBabyGpt.batch, kBabyGpt.block}); }));
  return out;
}

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Where the suite runs: EMBER_SUITE_DEVICE, else the CPU.
Device suite_device() {
  static const Device d = [] {
    const char* e = std::getenv("EMBER_SUITE_DEVICE");
    if (!e || !*e || std::string(e) == "cpu") return kCPU;
    const std::string s = e;
    EMBER_CHECK(s.rfind("cuda", 0) == 0, "EMBER_SUITE_DEVICE: cpu, cuda or cuda:N, got ", s);
    EMBER_CHECK(cuda::is_available(), "EMBER_SUITE_DEVICE=", s, " but no CUDA device is usable");
    return Device{DeviceType::CUDA, s.size() > 5 ? std::stoi(s.substr(5)) : 0};
  }();
  return d;
}
bool on_gpu() { return suite_device().type == DeviceType::CUDA; }

// fn, and on the GPU its queued work finished.
std::function<void()> synced(std::function<void()> fn) {
  if (!on_gpu()) return fn;
  return [fn] {
    fn();
    cuda::synchronize();
  };
}

Args on_device(Args a) {
  for (Tensor& t : a) t = t.to(suite_device());
  return a;
}

double peak_mb(const std::function<void()>& fn) {
  if (on_gpu()) {
    const int dev = suite_device().index;
    cuda::synchronize();
    cuda::reset_peak_memory_stats(dev);
    const size_t before = cuda::memory_stats(dev).allocated_bytes;
    fn();
    cuda::synchronize();
    return double(cuda::memory_stats(dev).peak_allocated_bytes - before) / 1e6;
  }
  cpu_reset_peak();
  const size_t before = cpu_allocator_stats().allocated_bytes;
  fn();
  return double(cpu_allocator_stats().peak_allocated_bytes - before) / 1e6;
}

double max_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.detach().cpu().to_vector<double>(),
                            y = b.detach().cpu().to_vector<double>();
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

// The caches a cold or warm first call must not find filled by an earlier one.
void drop_process_caches() {
  reset_compile_caches();
  compiler::clear_memory_cache();
}

struct Captured {
  int64_t graphs = 0, breaks = 0, ops = 0;
};

template <class F>
Captured captured(const F& f) {
  const ExplainReport r = f.explain();
  return {r.graph_count, int64_t(r.breaks.size()), r.total_ops()};
}

CompileOptions compiler_options() {
  CompileOptions o;
  o.backend = "compiler";
  return o;
}

// One suite row: the timings and what the compiled callable captured, the peaks of one more
// call of each side, the error.
Row suite_row(const std::string& name, std::pair<double, double> ms, const Captured& cap,
              double cold_s, double warm_s, const std::function<void()>& eager,
              const std::function<void()>& compiled, double err) {
  Row r(name, ms.first);
  r.compiled_ms = ms.second;
  if (on_gpu()) r.device = "cuda:" + std::to_string(suite_device().index);
  r.extra = {{"graphs", double(cap.graphs)},
             {"breaks", double(cap.breaks)},
             {"ops", double(cap.ops)},
             {"cold_s", cold_s},
             {"warm_s", warm_s},
             {"eager_peak_mb", peak_mb(eager)},
             {"compiled_peak_mb", peak_mb(compiled)},
             {"max_abs_error", err}};
  return r;
}

Row inference_row(const Case& c, const Options& opt) {
  manual_seed(1);
  std::shared_ptr<nn::Module> m = c.make();
  m->to(suite_device());
  m->eval();
  const Args in = on_device(c.inputs());
  auto fn = [m, &c](const Args& a) { return c.forward(*m, a); };
  NoGradGuard no_grad;
  drop_process_caches();
  auto f = compile(fn, compiler_options());
  const double cold_s = seconds_of([&] { f(in); });
  const double err = max_diff(f(in), fn(in));  // replayed: the first call traces
  drop_process_caches();
  auto f2 = compile(fn, compiler_options());
  const double warm_s = seconds_of([&] { f2(in); });
  const int repeat = opt.quick ? 3 : opt.repeat;
  const auto eager = synced([&] { fn(in); }), compiled = synced([&] { f(in); });
  return suite_row("suite/" + c.name + "/inference", time_pair_ms(eager, compiled, repeat),
                   captured(f), cold_s, warm_s, eager, compiled, err);
}

Row training_row(const Case& c, const Options& opt) {
  manual_seed(1);
  std::shared_ptr<nn::Module> m = c.make();
  m->to(suite_device());
  m->train();
  Args args = on_device(c.inputs());
  for (Tensor& t : on_device(c.targets())) args.push_back(t);
  auto loss_fn = [m, &c](const Args& a) { return c.loss(*m, a); };
  optim::AdamW adam(optim::decay_groups(*m, 0.01), 1e-3);
  optim::AdamW adam_compiled(optim::decay_groups(*m, 0.01), 1e-3);
  adam_compiled.set_compiled(true);
  drop_process_caches();
  auto f = compile(loss_fn, compiler_options());
  // The loss from the same weights, both ways (the compiled one replayed: the first call
  // traces).
  const double cold_s = seconds_of([&] { f(args); });
  const double err = max_diff(f(args), loss_fn(args));
  drop_process_caches();
  auto f2 = compile(loss_fn, compiler_options());
  const double warm_s = seconds_of([&] { f2(args); });
  auto step = [&](bool compiled) {
    Tensor loss = compiled ? f(args) : loss_fn(args);
    optim::AdamW& o = compiled ? adam_compiled : adam;
    o.zero_grad();
    loss.backward();
    o.step();
  };
  const int repeat = opt.quick ? 3 : std::max(5, opt.repeat / 2);
  const auto eager = synced([&] { step(false); }), compiled = synced([&] { step(true); });
  return suite_row("suite/" + c.name + "/training", time_pair_ms(eager, compiled, repeat),
                   captured(f), cold_s, warm_s, eager, compiled, err);
}

}  // namespace

EMBER_BENCH(suite) {
  std::vector<Row> rows;
  bool any = false;
  for (const Case& c : cases())
    any |= opt.wants("suite/" + c.name + "/inference") || opt.wants("suite/" + c.name + "/training");
  if (!any) return rows;
  // Cold compiles build into a fresh kernel cache of this process; the other groups keep the
  // cache they were given.
  const char* given = std::getenv("EMBER_CACHE_DIR");
  const std::string previous = given ? given : "";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ember-suite-" + std::to_string(::getpid()));
  ::setenv("EMBER_CACHE_DIR", dir.c_str(), 1);
  double log_infer = 0, log_train = 0;
  int n_infer = 0, n_train = 0, one_graph = 0, models = 0;
  for (const Case& c : cases()) {
    bool whole = true, ran = false;
    for (const bool training : {false, true}) {
      const std::string name = "suite/" + c.name + (training ? "/training" : "/inference");
      if (!opt.wants(name)) continue;
      Row r = training ? training_row(c, opt) : inference_row(c, opt);
      (training ? log_train : log_infer) += std::log(r.eager_ms / r.compiled_ms);
      (training ? n_train : n_infer) += 1;
      for (const auto& [k, v] : r.extra)
        if ((k == "graphs" && v != 1) || (k == "breaks" && v != 0)) whole = false;
      rows.push_back(std::move(r));
      ran = true;
    }
    if (ran) {
      ++models;
      one_graph += whole;
    }
  }
  std::filesystem::remove_all(dir);
  if (given)
    ::setenv("EMBER_CACHE_DIR", previous.c_str(), 1);
  else
    ::unsetenv("EMBER_CACHE_DIR");
  if (models > 0) {
    Row s("suite/summary", NAN);
    if (on_gpu()) s.device = "cuda:" + std::to_string(suite_device().index);
    s.extra = {{"models", double(models)},
               {"geomean_speedup_inference", n_infer ? std::exp(log_infer / n_infer) : NAN},
               {"geomean_speedup_training", n_train ? std::exp(log_train / n_train) : NAN},
               {"share_one_graph", double(one_graph) / double(models)}};
    rows.push_back(s);
  }
  return rows;
}

}  // namespace ember::bench
