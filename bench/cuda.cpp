// CUDA rows (only where a GPU is present): the same workloads bench/compare_torch.py runs in
// PyTorch on the same card, under the same names, so each ratio is taken in one run.
//   cuda/add_f32_256M        a + b on 256M float32 against a device-to-device copy of the same
//                            bytes (fraction_of_copy)
//   cuda/softmax_f32_16384x4096, cuda/layer_norm_f32_16384x4096: row ops against the copy
//   cuda/matmul_bf16_8192    against cuBLAS called directly on the same buffers
//   cuda/add_1elem_overhead  host time to queue one tiny op (us_per_op), median over batches of
//                            256 queued back to back
//   cuda/attention_bf16      scaled_dot_product_attention forward and backward at the GPT's
//                            layer shape (batch 64, 6 heads, 256 tokens, head 64), bfloat16,
//                            causal, dropout 0.2: the fused kernels (fwd_ms: forward alone)
//   cuda/attention_gpt2_bf16 the same at GPT-2 124M's (batch 16, 12 heads, 1024 tokens, head
//                            64), causal, no dropout
//   cuda/gpt_train_step      nanoGPT's shakespeare_char step (6 layers, 6 heads, 384 wide,
//                            block 256, batch 64, dropout 0.2, AdamW, grad clip 1), float32;
//   cuda/gpt_train_step_bf16 the same under bfloat16 autocast
// Compiled rows: ember eager (eager_ms) against ember::compile of the same function
// (compiled_ms), timed interleaved; compile_s / cold_compile_s is the first compiled call, its
// kernels built into a new EMBER_CACHE_DIR.
//   cuda/fused_relu_add_mul_f32_256M  (relu(a) + b) * c on 256M float32 each (3 reads, 1 write)
//   cuda/compiled_softmax_f32_16384x4096, cuda/compiled_layer_norm_f32_16384x4096 (weight and
//                            bias over the last dim): as the eager rows; fraction_of_copy is the
//                            compiled time's, eager_fraction_of_copy the eager one's
//   cuda/gpt_forward_bf16, cuda/gpt_forward_gpt2_bf16: eval forward (no grad, bfloat16
//                            autocast) of the shakespeare_char shape (batch 64) and of GPT-2 124M
//                            (12 layers, 12 heads, 768 wide, block 1024, batch 16, vocab 50304)
//   cuda/gpt_train_step_compiled_bf16, cuda/gpt_train_step_gpt2_bf16: the bf16 training step
//                            of those shapes (dropout 0.2 and 0), compiled = model.loss compiled
//                            and AdamW::set_compiled; warm_start_s is the first compiled step
//                            in a new process (ember-bench --cuda-train-first-call) once the
//                            cold compile put the kernels on disk
//   cuda/gpt_forward_gpt2_b1_bf16: GPT-2 124M in bfloat16 weights, batch 1, 128 tokens, no grad:
//                            eager, compiled (compiled_ms) and mode "reduce-overhead"
//                            (reduce_overhead_ms, CUDA graphs)
//   cuda/gpt_decode_gpt2_bf16: greedy decoding of 500 tokens after a 128-token prompt with a
//                            preallocated key/value cache, GPT-2 124M in bfloat16: tokens_per_s
//                            of the decode step compiled "reduce-overhead"; same_tokens: 1 when
//                            its tokens are eager decoding's (agreeing_tokens: how many lead
//                            before the first that differs)
//   cuda/gpt_train_step_b8_bf16: the shakespeare_char step at batch 8, compiled "default"
//                            (compiled_ms) against "reduce-overhead" (reduce_overhead_ms)
// GPU times are wall times around the work with the device synchronized before and after.
// EMBER_BENCH_COMPILED_ONLY=1 times the compiled sides alone (for EMBER_PROFILE_OPS tables).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>

#include "bench.h"
#include "dispatch/op_profile.h"
#include "ember/cuda.h"
#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/nn.h"
#include "ember/optim.h"
#include "gpt_configs.h"

#ifdef EMBER_BENCH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

namespace ember::bench {

#ifdef EMBER_BENCH_CUDA
namespace {

const Device kGpu{DeviceType::CUDA, 0};

TensorOptions on_gpu(DType t = DType::Float32) {
  TensorOptions o(t);
  o.device = kGpu;
  return o;
}

// Waits for every stream of the device (the reference copies and cuBLAS calls run on the
// default stream).
void sync_all() {
  cuda::synchronize();
  cudaDeviceSynchronize();
}

// Median ms of `inner` back-to-back calls of fn, the device synchronized around each batch.
double gpu_ms(const std::function<void()>& fn, int repeat, int inner = 1) {
  return time_ms([&] {
    for (int i = 0; i < inner; ++i) fn();
    sync_all();
  }, repeat, 2) / inner;
}

// EMBER_BENCH_COMPILED_ONLY=1: rows time their compiled side alone (eager_ms NaN), so that an
// EMBER_PROFILE_OPS table shows the compiled kernels only.
bool compiled_only() {
  static const bool on = std::getenv("EMBER_BENCH_COMPILED_ONLY") != nullptr;
  return on;
}

// Eager against compiled as time_pair_ms takes them, the device synchronized after each call
// (the compiled side alone under compiled_only()).
std::pair<double, double> gpu_pair_ms(const std::function<void()>& eager,
                                      const std::function<void()>& compiled, int repeat) {
  if (compiled_only()) {
    // The op profile, if on, of these timed calls alone (not of the first calls' setup).
    compiled();
    sync_all();
    op_profile::restart();
    const double ms = gpu_ms(compiled, repeat);
    op_profile::print_now(std::to_string(repeat + 2) + " timed compiled calls");
    return {NAN, ms};
  }
  return time_pair_ms([&] { eager(); sync_all(); }, [&] { compiled(); sync_all(); }, repeat);
}

// Wall seconds of one call of fn, the device synchronized before and after.
double seconds_of(const std::function<void()>& fn) {
  sync_all();
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  sync_all();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The host's share of fn: the median time to queue it, the device idle at its start. Near fn's
// device time, the GPU waits on the host; well below, the kernels are what take the time.
double host_ms(const std::function<void()>& fn, int repeat) {
  std::vector<double> host;
  for (int i = 0; i < repeat; ++i) {
    cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    host.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  cuda::synchronize();
  std::sort(host.begin(), host.end());
  return host[host.size() / 2];
}

// Peak allocated MB on the device over one call of fn, above what was allocated before it.
double peak_mb(const std::function<void()>& fn) {
  sync_all();
  cuda::reset_peak_memory_stats();
  const size_t before = cuda::memory_stats().allocated_bytes;
  fn();
  sync_all();
  return double(cuda::memory_stats().peak_allocated_bytes - before) / 1e6;
}

// For one workload, compiles start cold: no code shared in memory with earlier workloads and
// a new EMBER_CACHE_DIR, removed (and the old value restored) at the end of the scope.
class ColdCompiles {
 public:
  ColdCompiles() {
    reset_compile_caches();
    if (const char* d = std::getenv("EMBER_CACHE_DIR")) old_ = d;
    if (::mkdtemp(dir_))
      ::setenv("EMBER_CACHE_DIR", dir_, 1);
    else
      dir_[0] = 0;
  }
  ~ColdCompiles() {
    if (old_)
      ::setenv("EMBER_CACHE_DIR", old_->c_str(), 1);
    else
      ::unsetenv("EMBER_CACHE_DIR");
    std::error_code ec;
    if (dir_[0]) std::filesystem::remove_all(dir_, ec);
  }
  ColdCompiles(const ColdCompiles&) = delete;
  ColdCompiles& operator=(const ColdCompiles&) = delete;

 private:
  char dir_[32] = "/tmp/ember-bench-cache-XXXXXX";
  std::optional<std::string> old_;
};

// ms of a device-to-device copy of `bytes`.
double copy_ms(size_t bytes, int repeat) {
  void *src = nullptr, *dst = nullptr;
  cudaMalloc(&src, bytes);
  cudaMalloc(&dst, bytes);
  const double ms = gpu_ms([&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0); },
                           repeat);
  cudaFree(src);
  cudaFree(dst);
  return ms;
}

// gbps and fraction_of_copy of the compiled time when there is one, else of the eager time.
Row bandwidth_row(const std::string& name, double ms, double bytes, int repeat,
                  double compiled_ms = NAN) {
  const double ref = copy_ms(size_t(bytes / 2), repeat);  // a copy reads and writes half each
  const double t = std::isnan(compiled_ms) ? ms : compiled_ms;
  Row r{name, ms};
  r.compiled_ms = compiled_ms;
  r.device = kGpu.str();
  r.extra = {{"gbps", bytes / (t * 1e6)},
             {"copy_gbps", bytes / (ref * 1e6)},
             {"fraction_of_copy", ref / t}};
  if (!std::isnan(compiled_ms)) r.extra.push_back({"eager_fraction_of_copy", ref / ms});
  return r;
}

// A bandwidth row for fn(args...) eager against compiled, with compile_s (the first compiled
// call, cold).
template <class F, class... A>
Row compiled_bandwidth_row(const std::string& name, F fn, double bytes, int repeat,
                           const A&... args) {
  ColdCompiles cold;
  auto compiled = compile(fn);
  const double compile_s = seconds_of([&] { compiled(args...); });
  const auto [ms, cms] =
      gpu_pair_ms([&] { Tensor y = fn(args...); }, [&] { Tensor y = compiled(args...); }, repeat);
  Row r = bandwidth_row(name, ms, bytes, repeat, cms);
  r.extra.push_back({"compile_s", compile_s});
  return r;
}

// The GPT shapes of the compiled rows: nanoGPT's shakespeare_char and GPT-2 124M.
struct GpuGpt {
  const char* suffix;  // in the row names
  GptBenchConfig shape;
  int64_t vocab;
};
std::vector<GpuGpt> gpu_gpts(bool quick) {
  return {{"", {"shakespeare_char", 6, 6, 384, 256, quick ? 8 : 64, 0.2}, 65},
          {"_gpt2", {"gpt2", 12, 12, 768, 1024, quick ? 2 : 16, 0.0}, 50304}};
}
std::shared_ptr<nn::GPT> gpu_gpt_model(const GpuGpt& g, double dropout) {
  nn::GPTConfig c = gpt_config(g.shape);
  c.vocab_size = g.vocab;
  c.dropout = dropout;
  manual_seed(1);
  auto model = std::make_shared<nn::GPT>(c);
  model->to(kGpu);
  return model;
}

// A GPT's bf16 training step, eager or compiled (model.loss compiled, AdamW::set_compiled), on
// fixed random batches; one optimizer per mode over the same parameters.
struct GpuTrainStep {
  explicit GpuTrainStep(const GpuGpt& g, const std::string& mode = "default")
      : model(gpu_gpt_model(g, g.shape.dropout)),
        adam(optim::decay_groups(*model, 0.1), 1e-3, 0.9, 0.99),
        adam_compiled(optim::decay_groups(*model, 0.1), 1e-3, 0.9, 0.99),
        params(model->parameters()),
        x(randint(0, g.vocab, {g.shape.batch, g.shape.block}, on_gpu(DType::Int64))),
        y(randint(0, g.vocab, {g.shape.batch, g.shape.block}, on_gpu(DType::Int64))),
        loss_fn(compile(std::function<Tensor(const Tensor&, const Tensor&)>(
            [m = model](const Tensor& a, const Tensor& b) { return m->loss(a, b); }),
            mode_options(mode))) {
    adam_compiled.set_compiled(true);
  }
  static CompileOptions mode_options(const std::string& mode) {
    CompileOptions o;
    o.mode = mode;
    return o;
  }
  void step(bool compiled) {
    EnableGradGuard grad;
    Tensor loss;
    {
      autocast bf16(DType::BFloat16);
      loss = compiled ? loss_fn(x, y) : model->loss(x, y);
    }
    optim::AdamW& o = compiled ? adam_compiled : adam;
    o.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(params, 1.0);
    o.step();
  }
  std::shared_ptr<nn::GPT> model;
  optim::AdamW adam, adam_compiled;
  std::vector<Tensor> params;
  Tensor x, y;
  CompiledFunction<std::function<Tensor(const Tensor&, const Tensor&)>> loss_fn;
};

// GPT-2 124M in bfloat16 weights, eval mode, for the batch-1 rows.
std::shared_ptr<nn::GPT> gpt2_bf16() {
  auto model = gpu_gpt_model(gpu_gpts(false)[1], 0.0);
  model->eval();
  model->to(DType::BFloat16);
  return model;
}

CompileOptions reduce_overhead() {
  CompileOptions o;
  o.mode = "reduce-overhead";
  return o;
}

// cuda/gpt_forward_gpt2_b1_bf16: one sequence of 128 tokens through GPT-2 124M (bfloat16
// weights, no grad) to its logits: eager, compiled, and compiled with mode "reduce-overhead".
Row gpt2_b1_forward_row(int repeat) {
  NoGradGuard no_grad;
  auto model = gpt2_bf16();
  manual_seed(1);
  const Tensor x = randint(0, 50304, {1, 128}, on_gpu(DType::Int64));
  ColdCompiles cold;
  auto forward = compile(model);
  auto graphed = compile(model, reduce_overhead());
  const double cold_s = seconds_of([&] { forward(x); });
  const double ro_cold_s = seconds_of([&] { graphed(x); graphed(x); });
  const CudaGraphCounters c0 = cuda_graph_counters();
  constexpr int kInner = 20;  // a forward is about a millisecond: time them in runs
  auto many = [&](auto&& f) { return [&, f] { for (int i = 0; i < kInner; ++i) Tensor l = f(); }; };
  const auto [ms, cms] = gpu_pair_ms(many([&] { return model->forward(x); }),
                                     many([&] { return forward(x); }), repeat);
  const double ro_ms = gpu_ms(many([&] { return graphed(x); }), repeat);
  const CudaGraphCounters c1 = cuda_graph_counters();
  Row r{"cuda/gpt_forward_gpt2_b1_bf16", ms / kInner};
  r.compiled_ms = cms / kInner;
  r.device = kGpu.str();
  r.extra.push_back({"reduce_overhead_ms", ro_ms / kInner});
  r.extra.push_back({"cold_compile_s", cold_s});
  r.extra.push_back({"reduce_overhead_compile_s", ro_cold_s});
  r.extra.push_back({"replays", double(c1.replays - c0.replays)});
  r.extra.push_back({"unrecorded_runs", double(c1.unrecorded_runs - c0.unrecorded_runs)});
  r.note = "batch 1, 128 tokens, bfloat16 weights, no grad";
  return r;
}

// cuda/gpt_decode_gpt2_bf16: greedy generation of 500 tokens after a 128-token prompt, GPT-2
// 124M in bfloat16 weights: the prompt through forward_cached into a preallocated cache, then a
// decode_step per token (eager, compiled, compiled "reduce-overhead"); tokens/s over the 500
// decode steps, the argmax included, the prompt not.
Row gpt2_decode_row(bool quick) {
  NoGradGuard no_grad;
  auto model = gpt2_bf16();
  manual_seed(1);
  const int64_t prompt_len = 128, steps = quick ? 50 : 500;
  const Tensor prompt = randint(0, 50304, {1, prompt_len}, on_gpu(DType::Int64));
  using Step = std::function<Tensor(const Tensor&, const Tensor&, const std::vector<Tensor>&,
                                    const std::vector<Tensor>&)>;
  Step eager = [m = model](const Tensor& x, const Tensor& pos, const std::vector<Tensor>& k,
                           const std::vector<Tensor>& v) { return m->decode_step(x, pos, k, v); };
  ColdCompiles cold;
  auto compiled = compile(eager);
  auto graphed = compile(eager, reduce_overhead());
  double prefill_ms = 0;
  // The tokens and the seconds of the decode steps.
  auto generate = [&](const Step& step) {
    nn::KVCache cache = model->preallocated_cache(1);
    sync_all();
    auto t0 = std::chrono::steady_clock::now();
    cache.length = 0;
    Tensor logits = model->forward_cached(prompt, cache);
    Tensor idx = logits.select(1, -1).argmax(-1, true);
    sync_all();
    auto t1 = std::chrono::steady_clock::now();
    prefill_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    std::vector<Tensor> tokens{idx};
    // One position tensor refilled each step (as torch's loop adds 1 to its own): a recorded
    // step reads it in place.
    Tensor pos = zeros({1}, on_gpu(DType::Int64));
    for (int64_t i = 0; i < steps; ++i) {
      pos.fill_(double(prompt_len + i));
      // The last step's logits are dropped before the next: a replay moves outputs the caller
      // still holds out of its graph's pool (a copy), and the loop has no use for them.
      logits = Tensor();
      logits = step(idx, pos, cache.k, cache.v);
      idx = logits.select(1, -1).argmax(-1, true);
      tokens.push_back(idx);
    }
    sync_all();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    return std::make_pair(cat(tokens, 1).cpu().to_vector<int64_t>(), s);
  };
  if (compiled_only()) {
    // The op profile, if on, of the default mode's decode steps alone.
    generate(compiled);
    op_profile::restart();
    const double s = generate(compiled).second;
    op_profile::print_now("the prompt, then " + std::to_string(steps) +
                          " decode steps compiled in the default mode");
    Row r{"cuda/gpt_decode_gpt2_bf16", NAN};
    r.compiled_ms = s * 1000 / double(steps);
    r.device = kGpu.str();
    r.note = "EMBER_BENCH_COMPILED_ONLY: the default mode alone, per token";
    return r;
  }
  auto [eager_tokens, eager_s] = generate(eager);
  const double compile_s = seconds_of([&] { generate(graphed); });
  generate(compiled);
  auto [default_tokens, default_s] = generate(compiled);
  const CudaGraphCounters c0 = cuda_graph_counters();
  auto [graphed_tokens, graphed_s] = generate(graphed);
  const CudaGraphCounters c1 = cuda_graph_counters();
  Row r{"cuda/gpt_decode_gpt2_bf16", eager_s * 1000 / double(steps)};
  r.compiled_ms = graphed_s * 1000 / double(steps);
  r.device = kGpu.str();
  r.extra.push_back({"tokens_per_s", double(steps) / graphed_s});
  r.extra.push_back({"default_mode_tokens_per_s", double(steps) / default_s});
  r.extra.push_back({"eager_tokens_per_s", double(steps) / eager_s});
  r.extra.push_back({"prefill_ms", prefill_ms});
  r.extra.push_back({"first_generation_s", compile_s});
  r.extra.push_back({"same_tokens", graphed_tokens == eager_tokens ? 1.0 : 0.0});
  r.extra.push_back({"default_same_tokens", default_tokens == eager_tokens ? 1.0 : 0.0});
  // Where the tokens first differ from eager's (all of them when they never do).
  auto agreeing = [&](const std::vector<int64_t>& t) {
    return double(std::mismatch(t.begin(), t.end(), eager_tokens.begin(), eager_tokens.end())
                      .first - t.begin());
  };
  r.extra.push_back({"agreeing_tokens", agreeing(graphed_tokens)});
  r.extra.push_back({"default_agreeing_tokens", agreeing(default_tokens)});
  r.extra.push_back({"replays", double(c1.replays - c0.replays)});
  r.extra.push_back({"unrecorded_runs", double(c1.unrecorded_runs - c0.unrecorded_runs)});
  r.extra.push_back({"moved_outputs", double(c1.moved_outputs - c0.moved_outputs)});
  r.note = "batch 1, 128-token prompt, " + std::to_string(steps) +
           " greedy decode steps, bfloat16 weights; compiled_ms: reduce-overhead, per token";
  return r;
}

// cuda/gpt_train_step_b8_bf16: the shakespeare_char training step at batch 8 (bfloat16
// autocast, dropout 0.2, AdamW::set_compiled, grad clipping), compiled in mode "default"
// (compiled_ms) and "reduce-overhead" (reduce_overhead_ms).
Row small_batch_train_row(bool quick) {
  GpuGpt g = gpu_gpts(quick)[0];
  g.shape.batch = 8;
  const int repeat = quick ? 3 : 20;
  if (compiled_only()) {
    // The default mode's steps alone (a replay runs the same kernels), for an op profile or
    // scripts/kernel-times.py: two warm steps, then the timed ones.
    GpuTrainStep plain(g);
    plain.step(true);
    plain.step(true);
    Row r{"cuda/gpt_train_step_b8_bf16", NAN};
    r.compiled_ms = gpu_pair_ms([] {}, [&] { plain.step(true); }, repeat).second;
    r.device = kGpu.str();
    r.note = "EMBER_BENCH_COMPILED_ONLY: the default mode alone";
    return r;
  }
  ColdCompiles cold;
  GpuTrainStep plain(g), graphed(g, "reduce-overhead");
  plain.step(false);
  plain.step(true);
  for (int i = 0; i < 3; ++i) graphed.step(true);
  const CudaGraphCounters c0 = cuda_graph_counters();
  const auto [cms, ro_ms] = gpu_pair_ms([&] { plain.step(true); }, [&] { graphed.step(true); },
                                        repeat);
  const CudaGraphCounters c1 = cuda_graph_counters();
  const double ms = gpu_ms([&] { plain.step(false); }, repeat);
  Row r{"cuda/gpt_train_step_b8_bf16", ms};
  r.compiled_ms = cms;
  r.device = kGpu.str();
  r.extra.push_back({"reduce_overhead_ms", ro_ms});
  r.extra.push_back({"reduce_overhead_over_default", ro_ms / cms});
  r.extra.push_back({"compiled_host_ms", host_ms([&] { plain.step(true); }, 5)});
  r.extra.push_back({"reduce_overhead_host_ms", host_ms([&] { graphed.step(true); }, 5)});
  r.extra.push_back({"replays", double(c1.replays - c0.replays)});
  r.extra.push_back({"unrecorded_runs", double(c1.unrecorded_runs - c0.unrecorded_runs)});
  r.extra.push_back({"moved_outputs", double(c1.moved_outputs - c0.moved_outputs)});
  r.note = "shakespeare_char at batch 8, bfloat16 autocast; compiled: model.loss and "
           "AdamW::set_compiled";
  return r;
}

}  // namespace

int cuda_train_first_call_main(const std::string& shape, bool quick) {
  if (!cuda::is_available()) return 2;
  for (const GpuGpt& g : gpu_gpts(quick)) {
    if (shape != g.shape.name) continue;
    GpuTrainStep t(g);
    t.step(false);  // the CUDA libraries' own start, as the row's cold compile leaves it out
    std::printf("%.6f\n", seconds_of([&] { t.step(true); }));
    return 0;
  }
  return 2;
}


EMBER_BENCH(cuda) {
  std::vector<Row> rows;
  if (!cuda::is_available()) return rows;
  NoGradGuard no_grad;
  const int repeat = opt.quick ? 3 : opt.repeat;

  if (opt.wants("cuda/add_f32_256M")) {
    const int64_t n = opt.quick ? (int64_t(1) << 24) : (int64_t(256) << 20);
    Tensor a = rand({n}, on_gpu()), b = rand({n}, on_gpu());
    const double ms = gpu_ms([&] { Tensor c = a + b; }, repeat);
    rows.push_back(bandwidth_row("cuda/add_f32_256M", ms, 3.0 * double(n) * 4, repeat));
  }
  const int64_t rows_n = opt.quick ? 1024 : 16384, cols = 4096;
  if (opt.wants("cuda/softmax_f32_16384x4096")) {
    Tensor x = randn({rows_n, cols}, on_gpu());
    const double ms = gpu_ms([&] { Tensor y = x.softmax(-1); }, repeat);
    rows.push_back(bandwidth_row("cuda/softmax_f32_16384x4096", ms,
                                 2.0 * double(rows_n * cols) * 4, repeat));
  }
  if (opt.wants("cuda/layer_norm_f32_16384x4096")) {
    Tensor x = randn({rows_n, cols}, on_gpu());
    Tensor w = ones({cols}, on_gpu()), b = zeros({cols}, on_gpu());
    const double ms = gpu_ms([&] { Tensor y = layer_norm(x, {cols}, w, b); }, repeat);
    rows.push_back(bandwidth_row("cuda/layer_norm_f32_16384x4096", ms,
                                 2.0 * double(rows_n * cols) * 4, repeat));
  }
  if (opt.wants("cuda/matmul_bf16_8192")) {
    const int64_t m = opt.quick ? 1024 : 8192;
    Tensor a = randn({m, m}, on_gpu(DType::BFloat16)), b = randn({m, m}, on_gpu(DType::BFloat16));
    Tensor c = empty({m, m}, on_gpu(DType::BFloat16));
    const double ms = gpu_ms([&] { Tensor d = matmul(a, b); }, repeat);
    cublasHandle_t h;
    cublasCreate(&h);
    const float one = 1, zero = 0;
    const double blas_ms = gpu_ms([&] {
      // Row-major C = A B is column-major C^T = B^T A^T.
      cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, int(m), int(m), int(m), &one, b.data_ptr(),
                   CUDA_R_16BF, int(m), a.data_ptr(), CUDA_R_16BF, int(m), &zero, c.data_ptr(),
                   CUDA_R_16BF, int(m), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }, repeat);
    cublasDestroy(h);
    const double flops = 2.0 * double(m) * double(m) * double(m);
    Row r{"cuda/matmul_bf16_8192", ms};
    r.device = kGpu.str();
    r.extra = {{"tflops", flops / (ms * 1e9)},
               {"cublas_tflops", flops / (blas_ms * 1e9)},
               {"fraction_of_cublas", blas_ms / ms}};
    rows.push_back(r);
  }
  if (opt.wants("cuda/add_1elem_overhead")) {
    // Host side: the time to queue a batch of ops, short enough that the launch queue never
    // fills (so the GPU's speed does not enter); the device is drained between batches.
    Tensor a = ones({1}, on_gpu()), b = ones({1}, on_gpu());
    constexpr int kBatch = 256;
    std::vector<double> per_op;
    for (int r = 0; r < (opt.quick ? 20 : 400); ++r) {
      cudaDeviceSynchronize();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kBatch; ++i) Tensor c = a + b;
      const auto t1 = std::chrono::steady_clock::now();
      per_op.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count() / kBatch);
    }
    cuda::synchronize();
    std::sort(per_op.begin(), per_op.end());
    const double ms = per_op[per_op.size() / 2];
    // Its parts, timed the same way: an in-place fill (dispatch and launch, no allocation) and
    // a new tensor dropped at once (allocator and tensor object, no launch).
    auto median_us = [&](auto&& op) {
      std::vector<double> t;
      for (int r = 0; r < (opt.quick ? 20 : 200); ++r) {
        cudaDeviceSynchronize();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < kBatch; ++i) op();
        const auto t1 = std::chrono::steady_clock::now();
        t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kBatch);
      }
      cuda::synchronize();
      std::sort(t.begin(), t.end());
      return t[t.size() / 2];
    };
    Tensor f = ones({1}, on_gpu());
    const double fill_us = median_us([&] { f.fill_(2.0); });
    const double alloc_us = median_us([&] { Tensor e = empty({1}, on_gpu()); });
    Row r{"cuda/add_1elem_overhead", ms};
    r.device = kGpu.str();
    r.extra.push_back({"us_per_op", ms * 1000});
    r.extra.push_back({"fill_inplace_us", fill_us});
    r.extra.push_back({"alloc_free_us", alloc_us});
    rows.push_back(r);
  }
  // Forward and backward of the GPT's attention: shakespeare_char's (dropout 0.2) and GPT-2's.
  auto attention_row = [&](const char* name, int64_t B, int64_t H, int64_t T, double dropout) {
    if (!opt.wants(name)) return;
    const int64_t hs = 64;
    Tensor q = randn({B, H, T, hs}, on_gpu(DType::BFloat16)).requires_grad_(true);
    Tensor k = randn({B, H, T, hs}, on_gpu(DType::BFloat16)).requires_grad_(true);
    Tensor v = randn({B, H, T, hs}, on_gpu(DType::BFloat16)).requires_grad_(true);
    Tensor g = randn({B, H, T, hs}, on_gpu(DType::BFloat16));
    const double fwd_ms =
        gpu_ms([&] { scaled_dot_product_attention(q, k, v, true, dropout); }, repeat);
    const double ms = gpu_ms([&] {
      EnableGradGuard grad;
      scaled_dot_product_attention(q, k, v, true, dropout).backward(g);
    }, repeat);
    // The useful products under the causal mask: q k^T and p v forward, 2.5 times that backward.
    const double flops = 3.5 * 2 * 2.0 * double(B * H) * double(T) * double(T) * double(hs) / 2;
    Row r{name, ms};
    r.device = kGpu.str();
    r.extra = {{"fwd_ms", fwd_ms}, {"tflops", flops / (ms * 1e9)}};
    r.note = "fwd + bwd, causal, dropout " + std::to_string(dropout).substr(0, 3);
    rows.push_back(r);
  };
  attention_row("cuda/attention_bf16", opt.quick ? 8 : 64, 6, 256, 0.2);
  attention_row("cuda/attention_gpt2_bf16", opt.quick ? 2 : 16, 12, 1024, 0.0);
  for (const bool bf16 : {false, true}) {
    const std::string name = bf16 ? "cuda/gpt_train_step_bf16" : "cuda/gpt_train_step";
    if (!opt.wants(name)) continue;
    GptBenchConfig c{"shakespeare_char", 6, 6, 384, 256, opt.quick ? 8 : 64, 0.2};
    manual_seed(1);
    nn::GPT model(gpt_config(c));
    model.to(kGpu);
    optim::AdamW adam(optim::decay_groups(model, 0.1), 1e-3, 0.9, 0.99);
    const std::vector<Tensor> params = model.parameters();
    TensorOptions ids = on_gpu(DType::Int64);
    Tensor x = randint(0, 65, {c.batch, c.block}, ids), y = randint(0, 65, {c.batch, c.block}, ids);
    auto step = [&] {
      EnableGradGuard grad;
      Tensor loss;
      {
        std::optional<autocast> scope;
        if (bf16) scope.emplace(DType::BFloat16);
        loss = model.loss(x, y);
      }
      adam.zero_grad();
      loss.backward();
      optim::clip_grad_norm_(params, 1.0);
      adam.step();
    };
    step();
    cuda::synchronize();
    cuda::reset_peak_memory_stats();
    const size_t before = cuda::memory_stats().allocated_bytes;
    const double ms = gpu_ms(step, opt.quick ? 2 : 10);
    Row r{name, ms};
    r.device = kGpu.str();
    r.extra.push_back({"host_ms", host_ms(step, opt.quick ? 2 : 5)});
    r.extra.push_back(
        {"peak_mb", double(cuda::memory_stats().peak_allocated_bytes - before) / 1e6});
    r.extra.push_back({"tokens_per_s", double(c.batch * c.block) / (ms / 1000)});
    r.note = bf16 ? "bfloat16 autocast, eager" : "float32, eager";
    rows.push_back(r);
  }

  // Compiled against eager.
  if (opt.wants("cuda/fused_relu_add_mul_f32_256M")) {
    const int64_t n = opt.quick ? (int64_t(1) << 24) : (int64_t(256) << 20);
    Tensor a = randn({n}, on_gpu()), b = randn({n}, on_gpu()), c = randn({n}, on_gpu());
    auto f = [](const Tensor& p, const Tensor& q, const Tensor& r) { return (p.relu() + q) * r; };
    rows.push_back(compiled_bandwidth_row("cuda/fused_relu_add_mul_f32_256M", f,
                                          4.0 * double(n) * 4, repeat, a, b, c));
  }
  if (opt.wants("cuda/compiled_softmax_f32_16384x4096")) {
    Tensor x = randn({rows_n, cols}, on_gpu());
    auto f = [](const Tensor& t) { return t.softmax(-1); };
    rows.push_back(compiled_bandwidth_row("cuda/compiled_softmax_f32_16384x4096", f,
                                          2.0 * double(rows_n * cols) * 4, repeat, x));
  }
  if (opt.wants("cuda/compiled_layer_norm_f32_16384x4096")) {
    Tensor x = randn({rows_n, cols}, on_gpu());
    Tensor w = randn({cols}, on_gpu()), b = randn({cols}, on_gpu());
    auto f = [](const Tensor& t, const Tensor& weight, const Tensor& bias) {
      return layer_norm(t, {t.size(-1)}, weight, bias);
    };
    rows.push_back(compiled_bandwidth_row("cuda/compiled_layer_norm_f32_16384x4096", f,
                                          2.0 * double(rows_n * cols) * 4, repeat, x, w, b));
  }
  for (const GpuGpt& g : gpu_gpts(opt.quick)) {
    const std::string name = std::string("cuda/gpt_forward") + g.suffix + "_bf16";
    if (!opt.wants(name)) continue;
    auto model = gpu_gpt_model(g, 0.0);
    model->eval();
    Tensor x = randint(0, g.vocab, {g.shape.batch, g.shape.block}, on_gpu(DType::Int64));
    ColdCompiles cold;
    autocast bf16(DType::BFloat16);
    auto forward = compile(model);
    const double cold_s = seconds_of([&] { forward(x); });
    const auto [ms, cms] = gpu_pair_ms([&] { Tensor logits = model->forward(x); },
                                       [&] { Tensor logits = forward(x); }, repeat);
    Row r{name, ms};
    r.compiled_ms = cms;
    r.device = kGpu.str();
    r.extra.push_back({"cold_compile_s", cold_s});
    r.extra.push_back({"tokens_per_s", double(g.shape.batch * g.shape.block) / (cms / 1000)});
    r.note = "eval forward, no grad, bfloat16 autocast";
    rows.push_back(r);
  }
  if (opt.wants("cuda/gpt_forward_gpt2_b1_bf16")) rows.push_back(gpt2_b1_forward_row(repeat));
  if (opt.wants("cuda/gpt_decode_gpt2_bf16")) rows.push_back(gpt2_decode_row(opt.quick));
  if (opt.wants("cuda/gpt_train_step_b8_bf16")) rows.push_back(small_batch_train_row(opt.quick));
  for (const GpuGpt& g : gpu_gpts(opt.quick)) {
    const std::string name = *g.suffix ? std::string("cuda/gpt_train_step") + g.suffix + "_bf16"
                                       : "cuda/gpt_train_step_compiled_bf16";
    if (!opt.wants(name)) continue;
    ColdCompiles cold;
    GpuTrainStep t(g);
    auto step = [&](bool compiled) { t.step(compiled); };
    step(false);
    const double compile_s = seconds_of([&] { step(true); });
    // The same step's first compiled call in a new process, its kernels on disk by now.
    const double warm_s = seconds_from_new_process(std::string("--cuda-train-first-call ") +
                                                   g.shape.name + (opt.quick ? " --quick" : ""));
    const int64_t batch = g.shape.batch, block = g.shape.block;
    const auto [ms, cms] =
        gpu_pair_ms([&] { step(false); }, [&] { step(true); }, opt.quick ? 2 : 10);
    const double tokens = double(batch * block);
    Row r{name, ms};
    r.compiled_ms = cms;
    r.device = kGpu.str();
    r.extra.push_back({"compile_s", compile_s});
    r.extra.push_back({"warm_start_s", warm_s});
    r.extra.push_back({"tokens_per_s", tokens / (cms / 1000)});
    r.extra.push_back({"eager_tokens_per_s", tokens / (ms / 1000)});
    r.extra.push_back({"host_ms", host_ms([&] { step(false); }, opt.quick ? 2 : 5)});
    r.extra.push_back({"compiled_host_ms", host_ms([&] { step(true); }, opt.quick ? 2 : 5)});
    r.extra.push_back({"eager_peak_mb", peak_mb([&] { step(false); })});
    r.extra.push_back({"compiled_peak_mb", peak_mb([&] { step(true); })});
    r.note = "bfloat16 autocast; compiled: model.loss and AdamW::set_compiled";
    rows.push_back(r);
  }
  return rows;
}
#else
int cuda_train_first_call_main(const std::string&, bool) { return 2; }
#endif

}  // namespace ember::bench
