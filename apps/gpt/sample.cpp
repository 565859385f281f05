// ember-gpt sample: load a checkpoint and print generated text.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <sstream>

#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/io.h"
#include "ember/nn.h"
#include "gpt/gpt_app.h"

namespace ember::app {

int run_sample(const SampleOptions& o) {
  namespace fs = std::filesystem;
  const Device device = app_device(o.device);
  EMBER_CHECK(o.num_samples > 0 && o.max_new_tokens >= 0, "--num_samples must be positive and "
              "--max_new_tokens non-negative");
  std::string path = o.checkpoint;
  if (path.empty()) {
    path = o.out_dir + "/best.safetensors";
    if (!fs::exists(path)) path = o.out_dir + "/ckpt.safetensors";
  }
  EMBER_CHECK(fs::exists(path), "no checkpoint at ", path, "; train first (ember-gpt train --out_dir ",
              o.out_dir, ") or pass --checkpoint");
  io::Checkpoint ckpt = io::load_checkpoint(path);
  auto tok_it = ckpt.extra.find("tokenizer");
  EMBER_CHECK(tok_it != ckpt.extra.end(), path, " has no tokenizer in its metadata");
  io::CharTokenizer tok = io::CharTokenizer::from_json(tok_it->second);
  nn::GPTConfig cfg = nn::GPTConfig::from_json(ckpt.config);
  cfg.dropout = 0;
  auto model_ptr = std::make_shared<nn::GPT>(cfg);
  nn::GPT& model = *model_ptr;
  model.load_state_dict(ckpt.model);
  model.to(device);
  // 16-bit weights on a GPU by default (nanoGPT samples under bfloat16 autocast): the caches take
  // the weights' dtype, and generate draws from the logits in float32.
  if (const std::optional<DType> dt = app_autocast(o.dtype, device)) model.to(*dt);
  model.eval();

  std::string start = o.start;
  if (start.rfind("FILE:", 0) == 0) {
    std::ifstream f(start.substr(5));
    EMBER_CHECK(f, "--start: cannot read ", start.substr(5));
    std::stringstream ss;
    ss << f.rdbuf();
    start = ss.str();
  }
  std::vector<int64_t> ids = tok.encode(start);
  EMBER_CHECK(!ids.empty(), "--start must hold at least one character");
  manual_seed(o.seed);
  Tensor idx = from_vector(ids, {1, int64_t(ids.size())}, DType::Int64).to(device);
  // --compile: the prompt through a compiled prefill and each new token through a compiled
  // decode step over a key/value cache preallocated to block_size (its shapes do not depend on
  // the position, so one trace serves every position); past block_size, where the window
  // slides, the forward compiled with sizes left to vary.
  CompileOptions copts;
  copts.name = "sample forward";
  auto compiled = compile(model_ptr, copts);
  CompileOptions dopts;
  dopts.name = "sample decode step";
  // On a GPU one token's step is a few hundred small kernels: replayed as a recorded CUDA graph.
  if (device.type == DeviceType::CUDA) dopts.mode = "reduce-overhead";
  auto step = compile(
      [model_ptr](const Tensor& x, const Tensor& pos, const std::vector<Tensor>& k,
                  const std::vector<Tensor>& v) { return model_ptr->decode_step(x, pos, k, v); },
      dopts);
  // The prompt through a compiled prefill that fills the same caches (a graph per prompt length;
  // lengths that vary share kernels built over symbolic sizes).
  CompileOptions popts;
  popts.name = "sample prefill";
  auto prefill_step = compile(
      [model_ptr](const Tensor& x, const std::vector<Tensor>& k, const std::vector<Tensor>& v) {
        return model_ptr->prefill(x, k, v);
      },
      popts);
  std::function<Tensor(const Tensor&)> logits_of;
  nn::GPT::DecodeFn decode;
  nn::GPT::PrefillFn prefill;
  if (o.compile) {
    prefill = [&prefill_step](const Tensor& x, const std::vector<Tensor>& k,
                              const std::vector<Tensor>& v) { return prefill_step(x, k, v); };
    logits_of = [&compiled](const Tensor& x) { return compiled(x); };
    decode = [&step](const Tensor& x, const Tensor& pos, const std::vector<Tensor>& k,
                     const std::vector<Tensor>& v) { return step(x, pos, k, v); };
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < o.num_samples; ++s) {
    Tensor out = model.generate(idx, o.max_new_tokens, o.temperature, o.top_k, logits_of, decode,
                                prefill);
    std::cout << tok.decode(out.cpu()) << "\n---------------\n";
    std::cout.flush();
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t tokens = o.num_samples * o.max_new_tokens;
  std::fprintf(stderr, "sampled %lld tokens in %.2f s: %.1f tokens/s (%s)\n", (long long)tokens,
               secs, secs > 0 ? double(tokens) / secs : 0.0, o.compile ? "compiled" : "eager");
  if (o.compile) {
    std::fprintf(stderr, "compiled decode step: %lld graph(s) traced for every position\n",
                 (long long)step.stats().traces);
    if (device.type == DeviceType::CUDA) {
      const CudaGraphCounters g = cuda_graph_counters();
      std::fprintf(stderr,
                   "decode step as CUDA graphs: %lld recorded, %lld replays, %lld runs "
                   "unrecorded\n",
                   (long long)g.recordings, (long long)g.replays, (long long)g.unrecorded_runs);
    }
    const CompileStats st = compiled.stats();
    std::fprintf(stderr,
                 "compiled forward: %lld graphs traced (one per context length); %lld built "
                 "kernels of their own, %lld shared kernels built for other lengths, %lld ran "
                 "interpreted as the first of their form; %lld eager fallbacks\n",
                 (long long)st.traces,
                 (long long)(st.compiles - st.shared_compiles - st.deferred_compiles),
                 (long long)st.shared_compiles, (long long)st.deferred_compiles,
                 (long long)st.eager_fallbacks);
  }
  return 0;
}

}  // namespace ember::app
