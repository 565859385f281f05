// ember-ddp-bench: a GPT trained data-parallel for a few steps, for the scaling figures of
// DistributedDataParallel. Every rank draws the step's global batch (the same rows on every
// rank, from the step's seed) and trains on its own share, rows [r * batch, (r + 1) * batch);
// one process with --batch set to the global batch computes the same steps, so its losses are
// the reference curve. Rank 0 prints one JSON object: world size, rows per rank, ms per step
// and tokens per second over the timed steps (after --warmup), and every step's loss over the
// global batch. The training step is compiled (model.loss and AdamW), bfloat16 autocast on a
// GPU, float32 on the CPU.
//
//   mpirun -np 2 ember-ddp-bench --device cuda --model gpt2 --batch 16 --steps 20
//   ember-ddp-bench --device cuda --model gpt2 --batch 32 --steps 20     # the reference curve
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/autocast.h"
#include "ember/compile.h"
#include "ember/cuda.h"
#include "ember/distributed.h"
#include "ember/ember.h"
#include "ember/nn.h"
#include "ember/optim.h"

namespace {

using namespace ember;

struct ModelShape {
  int64_t layers, heads, embd, block, vocab;
};

ModelShape shape_of(const std::string& name) {
  if (name == "gpt2") return {12, 12, 768, 1024, 50304};
  if (name == "shakespeare") return {6, 6, 384, 256, 65};
  if (name == "tiny") return {2, 2, 32, 16, 65};
  throw std::runtime_error("--model: gpt2, shakespeare or tiny, not " + name);
}

void sync(Device d) {
  if (d.type == DeviceType::CUDA) cuda::synchronize();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPT training with DistributedDataParallel: scaling and loss curve"};
  std::string device_name = "cuda", model_name = "gpt2";
  int64_t batch = 16, steps = 20, warmup = 3, seed = 1234;
  app.add_option("--device", device_name, "cpu or cuda (each rank takes cuda:local_rank)")
      ->capture_default_str();
  app.add_option("--model", model_name, "gpt2 (124M), shakespeare or tiny")->capture_default_str();
  app.add_option("--batch", batch, "sequences per rank")->capture_default_str();
  app.add_option("--steps", steps, "steps after the warmup (timed)")->capture_default_str();
  app.add_option("--warmup", warmup, "steps before the timed ones (the first compiles)")
      ->capture_default_str();
  app.add_option("--seed", seed, "the batches' seed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    distributed::init();
    const int rank = distributed::rank(), world = distributed::world_size();
    Device device = kCPU;
    if (device_name == "cuda") {
      EMBER_CHECK(cuda::is_available(), "--device cuda: no CUDA device here");
      device = Device{DeviceType::CUDA, distributed::local_rank() % cuda::device_count()};
    } else {
      EMBER_CHECK(device_name == "cpu", "--device: cpu or cuda, not ", device_name);
    }
    const ModelShape s = shape_of(model_name);
    nn::GPTConfig c;
    c.n_layer = s.layers;
    c.n_head = s.heads;
    c.n_embd = s.embd;
    c.block_size = s.block;
    c.vocab_size = s.vocab;
    c.dropout = 0.0;
    manual_seed(1);
    nn::GPT model(c);
    model.to(device);
    std::unique_ptr<nn::DistributedDataParallel> ddp;
    if (world > 1) ddp = std::make_unique<nn::DistributedDataParallel>(model);
    optim::AdamW opt(optim::decay_groups(model, 0.1), 6e-4, 0.9, 0.95);
    opt.set_compiled(true);
    const std::vector<Tensor> params = model.parameters();
    auto loss_fn = compile([&model](const Tensor& x, const Tensor& y) { return model.loss(x, y); });
    std::optional<DType> amp;
    if (device.type == DeviceType::CUDA) amp = DType::BFloat16;
    TensorOptions ids(DType::Int64);
    ids.device = device;
    std::vector<double> losses;
    double timed_s = 0;
    for (int64_t step = 0; step < warmup + steps; ++step) {
      // The step's global batch, the same on every rank; this rank's rows of it.
      manual_seed(uint64_t(seed) + uint64_t(step));
      const Tensor rows = randint(0, s.vocab, {batch * world, s.block + 1});
      const Tensor mine = rows.slice(0, rank * batch, (rank + 1) * batch);
      const Tensor x = mine.slice(1, 0, s.block).contiguous().to(device);
      const Tensor y = mine.slice(1, 1, s.block + 1).contiguous().to(device);
      sync(device);
      const auto t0 = std::chrono::steady_clock::now();
      Tensor loss;
      {
        EnableGradGuard grad;
        std::optional<autocast> scope;
        if (amp) scope.emplace(*amp);
        loss = loss_fn(x, y);
      }
      opt.zero_grad();
      loss.backward();
      optim::clip_grad_norm_(params, 1.0);
      opt.step();
      sync(device);
      if (step >= warmup)
        timed_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // The loss over the global batch: the mean of the ranks' means (equal row counts).
      Tensor l = loss.detach().to(DType::Float64).reshape({1});
      if (world > 1) distributed::all_reduce(l);
      losses.push_back(l.cpu().item() / double(world));
    }
    if (rank == 0) {
      const double tokens = double(batch * world * s.block) * double(steps);
      std::printf("{\"world\": %d, \"device\": \"%s\", \"model\": \"%s\", \"batch_per_rank\": %lld, "
                  "\"steps\": %lld, \"ms_per_step\": %.4f, \"tokens_per_s\": %.1f, \"losses\": [",
                  world, device.str().c_str(), model_name.c_str(), (long long)batch,
                  (long long)steps, 1000 * timed_s / double(steps), tokens / timed_s);
      for (size_t i = 0; i < losses.size(); ++i)
        std::printf("%s%.6f", i ? ", " : "", losses[i]);
      std::printf("]}\n");
      std::fflush(stdout);
    }
    distributed::finalize();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember-ddp-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
