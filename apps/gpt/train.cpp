// ember-gpt train: nanoGPT's training loop (AdamW, warmup + cosine LR, grad clipping,
// periodic train/val evaluation, checkpoints, a loss CSV) on a character-level dataset.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>

#include "ember/compile.h"
#include "ember/cuda.h"
#include "ember/distributed.h"
#include "ember/ember.h"
#include "ember/io.h"
#include "ember/nn.h"
#include "ember/optim.h"
#include "gpt/gpt_app.h"
#include "gpt/loss_plot.h"

namespace ember::app {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string default_data_path() {
  // ./data, then the installed copy beside the program (<prefix>/bin/../share/ember/data), then
  // the source tree the program was built from.
  std::vector<std::string> candidates = {"data/tinyshakespeare.txt"};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    candidates.push_back(
        (exe.parent_path().parent_path() / "share/ember/data/tinyshakespeare.txt").string());
  candidates.push_back(std::string(EMBER_SOURCE_DIR) + "/data/tinyshakespeare.txt");
  for (const std::string& p : candidates)
    if (fs::exists(p)) return p;
  EMBER_FAIL("the default text data/tinyshakespeare.txt was not found; pass --data FILE");
}

namespace {

std::string duration_str(double seconds) {
  char buf[32];
  int s = int(std::lround(seconds));
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%dh%02dm", s / 3600, (s % 3600) / 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%dm%02ds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  return buf;
}

// A training step's loss, still on the device, with what its loss.csv row needs.
struct PendingLoss {
  int64_t iter = 0;
  Tensor loss;
  double lr = 0;
};

// The pending losses' values, read in one transfer (waiting for the device).
std::vector<double> read_losses(const std::vector<PendingLoss>& pending) {
  std::vector<Tensor> all;
  all.reserve(pending.size());
  for (const PendingLoss& p : pending) all.push_back(p.loss.reshape({1}).to(DType::Float64));
  return cat(all, 0).cpu().to_vector<double>();
}

// Mean loss over eval_iters batches of each split, in eval mode without grad, through `loss`
// (model.loss, or its compiled form: eval mode and no grad are an entry of their own). The
// losses add up on the device and are read once a split.
std::pair<double, double> estimate_loss(
    nn::GPT& model, const std::function<Tensor(const Tensor&, const Tensor&)>& loss,
    const io::TokenDataset& train, const io::TokenDataset& val, const TrainOptions& o,
    uint64_t seed, Device device, std::optional<DType> amp) {
  NoGradGuard no_grad;
  model.eval();
  double out[2];
  const io::TokenDataset* splits[2] = {&train, &val};
  for (int s = 0; s < 2; ++s) {
    Tensor total;
    for (int64_t k = 0; k < o.eval_iters; ++k) {
      auto [x, y] = splits[s]->get_batch(o.batch_size, o.block_size, seed + 1 + uint64_t(s),
                                         uint64_t(k), device);
      std::optional<autocast> scope;
      if (amp) scope.emplace(*amp);
      const Tensor l = loss(x, y).to(DType::Float64);
      total = total.defined() ? total + l : l;
    }
    out[s] = total.item() / double(o.eval_iters);
  }
  model.train();
  return {out[0], out[1]};
}

void validate(const TrainOptions& o) {
  const Device device = app_device(o.device);
  app_autocast(o.dtype, device);
  EMBER_CHECK(o.batch_size > 0 && o.block_size > 0 && o.max_iters >= 0 && o.eval_interval > 0 &&
                  o.eval_iters > 0 && o.log_interval > 0,
              "batch_size, block_size, eval_interval, eval_iters and log_interval must be positive "
              "and max_iters non-negative");
  EMBER_CHECK(o.n_embd % o.n_head == 0, "--n_embd (", o.n_embd, ") must be divisible by --n_head (",
              o.n_head, ")");
  EMBER_CHECK(o.dropout >= 0 && o.dropout < 1, "--dropout must be in [0, 1), got ", o.dropout);
  EMBER_CHECK(o.eager_probe_iters >= 0, "--eager_probe_iters must be non-negative");
  EMBER_CHECK(o.lr > 0 && o.min_lr >= 0, "--lr must be positive and --min_lr non-negative");
}

// Whether this process is one rank of a launch of several (mpirun sets OMPI_COMM_WORLD_SIZE or
// PMI_SIZE; other launchers WORLD_SIZE).
bool launched_as_ranks() {
  for (const char* name : {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(name); v && std::atoi(v) > 1) return true;
  return false;
}

io::Checkpoint make_checkpoint(const nn::GPT& model, const optim::Optimizer& opt, int64_t iter,
                               double best_val, const io::CharTokenizer& tok) {
  io::Checkpoint c;
  c.model = model.state_dict();
  c.optimizer = opt.state_dict();
  c.step = iter;
  c.config = model.config.to_json();
  c.rng = get_rng_state();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", best_val);
  c.extra["best_val_loss"] = buf;
  c.extra["tokenizer"] = tok.to_json();
  return c;
}

}  // namespace

Device app_device(const std::string& name) {
  const Device d = parse_device(name);
  if (d.type == DeviceType::CUDA) {
    EMBER_CHECK(cuda::built_with_cuda(), "--device ", name,
                ": this build of ember has no CUDA backend; rebuild with a CUDA toolkit or use "
                "--device cpu");
    EMBER_CHECK(d.index < cuda::device_count(), "--device ", name, ": ",
                cuda::device_count() == 0 ? std::string("no CUDA device is available here")
                                          : "there are only " +
                                                std::to_string(cuda::device_count()) +
                                                " CUDA devices",
                "; use --device cpu");
  }
  return d;
}

std::optional<DType> app_autocast(const std::string& dtype, Device device) {
  if (dtype == "auto")
    return device.type == DeviceType::CUDA ? std::optional<DType>(DType::BFloat16) : std::nullopt;
  if (dtype == "float32") return std::nullopt;
  if (dtype == "bfloat16") return DType::BFloat16;
  if (dtype == "float16") return DType::Float16;  // trained with loss scaling (GradScaler)
  EMBER_FAIL("--dtype ", dtype, ": expected auto, bfloat16, float16 or float32");
}

int run_train(const TrainOptions& opts) {
  TrainOptions o = opts;
  validate(o);
  // Under mpirun each process is a rank of one data-parallel job: the same model (rank 0's
  // weights, DistributedDataParallel averaging the grads), its own batches, and rank 0 alone
  // evaluating, logging and writing the checkpoints (in a single run's format).
  const bool ranks = launched_as_ranks();
  if (ranks) distributed::init();
  const int rank = ranks ? distributed::rank() : 0, world = ranks ? distributed::world_size() : 1;
  const bool master = rank == 0;
  if (!master) static_cast<void>(std::freopen("/dev/null", "w", stdout));
  const std::string data = o.data.empty() ? default_data_path() : o.data;
  fs::create_directories(o.out_dir);
  const std::string ckpt_path = o.out_dir + "/ckpt.safetensors";
  const std::string best_path = o.out_dir + "/best.safetensors";

  io::PreparedText prep = io::prepare_char_dataset(data, o.out_dir + "/data");
  io::TokenDataset train = io::TokenDataset::load(o.out_dir + "/data/train.bin", prep.tokenizer.vocab_size());
  io::TokenDataset val = io::TokenDataset::load(o.out_dir + "/data/val.bin", prep.tokenizer.vocab_size());

  nn::GPTConfig cfg;
  cfg.n_layer = o.n_layer;
  cfg.n_head = o.n_head;
  cfg.n_embd = o.n_embd;
  cfg.block_size = o.block_size;
  cfg.vocab_size = prep.tokenizer.vocab_size();
  cfg.dropout = o.dropout;
  cfg.bias = o.bias;

  int64_t iter = 0;
  double best_val = INFINITY;
  io::Checkpoint resumed;
  if (o.init_from == "resume") {
    EMBER_CHECK(fs::exists(ckpt_path), "--init_from resume: no checkpoint at ", ckpt_path);
    resumed = io::load_checkpoint(ckpt_path);
    nn::GPTConfig saved = nn::GPTConfig::from_json(resumed.config);
    saved.dropout = o.dropout;
    cfg = saved;
    o.n_layer = cfg.n_layer;
    o.n_head = cfg.n_head;
    o.n_embd = cfg.n_embd;
    o.block_size = cfg.block_size;
    iter = resumed.step;
    if (auto it = resumed.extra.find("best_val_loss"); it != resumed.extra.end())
      best_val = std::stod(it->second);
  }
  manual_seed(o.seed);
  Device device = app_device(o.device);
  if (ranks && device.type == DeviceType::CUDA && o.device == "cuda")
    device.index = distributed::local_rank() % std::max(1, cuda::device_count());
  const std::optional<DType> amp = app_autocast(o.dtype, device);
  nn::GPT model(cfg);  // initialized on the CPU (the same weights on every device), then moved
  model.to(device);
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  if (ranks) ddp = std::make_unique<nn::DistributedDataParallel>(model);
  optim::AdamW opt(optim::decay_groups(model, o.weight_decay), o.lr, o.beta1, o.beta2);
  // --compile also compiles the optimizer step: every parameter's update in one function (from
  // the first compiled iteration on, after --eager_probe_iters eager ones).
  opt.set_compiled(o.compile && o.eager_probe_iters == 0);
  if (o.init_from == "resume") {
    model.load_state_dict(resumed.model);
    opt.load_state_dict(resumed.optimizer);
    set_rng_state(resumed.rng);
    std::cout << "resumed from " << ckpt_path << " at iter " << iter << "\n";
  }
  // Ranks past 0 draw their own dropout masks (their own batches come from their own seed).
  const uint64_t batch_seed = o.seed + uint64_t(rank) * 1000003;
  if (rank > 0) manual_seed(batch_seed + uint64_t(iter));
  const std::vector<Tensor> params = model.parameters();
  // float16 autocast: the loss scaled so that small grads survive float16, steps with inf or
  // NaN grads skipped (the scale halved). A pass-through for the other dtypes.
  optim::GradScaler scaler(65536.0, 2.0, 0.5, 2000, amp == DType::Float16);
  // --compile: model.loss captured once and compiled by the generated-code backend into a forward
  // and a backward graph (training compile); backward() runs the compiled backward; AdamW's
  // step is compiled too (set_compiled above). Evaluation calls the same compiled function in
  // eval mode without grad, which guards on both and compiles an inference entry of its own.
  CompileOptions copts;
  copts.backend = "compiler";
  copts.name = "model.loss";
  auto compiled_loss =
      compile([&model](const Tensor& x, const Tensor& y) { return model.loss(x, y); }, copts);
  bool compile_reported = false;
  std::printf("model: %lld layers, %lld heads, %lld embd, block %lld, vocab %lld: %.2fM parameters\n",
              (long long)cfg.n_layer, (long long)cfg.n_head, (long long)cfg.n_embd,
              (long long)cfg.block_size, (long long)cfg.vocab_size,
              double(model.num_params_reported()) / 1e6);
  std::printf("device: %s, %s\n", device.str().c_str(),
              amp ? (std::string(dtype_name(*amp)) + " autocast (float32 weights)").c_str()
                  : "float32");
  std::printf("data: %s (%lld train / %lld val tokens); %lld tokens per iteration\n", data.c_str(),
              (long long)train.size(), (long long)val.size(),
              (long long)(o.batch_size * o.block_size * world));
  if (ranks)
    std::printf("data parallel: %d ranks of %lld sequences each (DistributedDataParallel); rank 0 "
                "evaluates, logs and saves\n",
                world, (long long)o.batch_size);

  // loss.csv, the plot and the checkpoints: rank 0's (the stream stays closed on the others).
  const std::string csv_path = o.out_dir + "/loss.csv";
  bool csv_new = o.init_from == "scratch" || !fs::exists(csv_path);
  std::ofstream csv;
  if (master) csv.open(csv_path, csv_new ? std::ios::trunc : std::ios::app);
  if (csv_new) csv << "iter,train_loss,val_loss,lr,ms\n";

  const auto t_start = Clock::now();
  double interval_ms = 0;
  int64_t interval_n = 0, steps_done = 0;
  double train_ms_total = 0;
  const int64_t first_iter = iter;
  double probe_ms = 0, compiled_ms = 0;  // --eager_probe_iters: both speeds, first steps aside
  int64_t probe_n = 0, compiled_n = 0;
  std::vector<PendingLoss> pending;  // steps whose loss is not read yet
  double unread_ms = 0;              // their time
  for (;; ++iter) {
    double lr = optim::cosine_lr(iter, o.lr, o.min_lr, o.warmup_iters, o.lr_decay_iters);
    opt.set_lr(lr);
    if (master && (iter % o.eval_interval == 0 || iter == o.max_iters)) {
      auto [tl, vl] = estimate_loss(
          model,
          [&](const Tensor& x, const Tensor& y) {
            return o.compile ? compiled_loss(x, y) : model.loss(x, y);
          },
          train, val, o, o.seed, device, amp);
      std::printf("step %lld: train loss %.4f, val loss %.4f\n", (long long)iter, tl, vl);
      csv << iter << ",," << vl << "," << lr << ",\n";
      csv.flush();
      write_loss_plot(csv_path, o.out_dir + "/loss.svg");
      bool improved = vl < best_val;
      if (improved) best_val = vl;
      if (iter > 0 || o.max_iters == 0) {
        io::Checkpoint c = make_checkpoint(model, opt, iter, best_val, prep.tokenizer);
        io::save_checkpoint(ckpt_path, c);
        if (improved || o.always_save_checkpoint) io::save_checkpoint(best_path, c);
      }
    }
    if (iter >= o.max_iters) break;

    const bool use_compiled = o.compile && iter - first_iter >= o.eager_probe_iters;
    if (use_compiled && !compile_reported && o.eager_probe_iters > 0) opt.set_compiled(true);
    const auto t0 = Clock::now();
    auto [x, y] = train.get_batch(o.batch_size, o.block_size, batch_seed, uint64_t(iter), device);
    Tensor loss;
    {
      std::optional<autocast> scope;  // the forward (and so the loss) under --dtype's autocast
      if (amp) scope.emplace(*amp);
      loss = use_compiled ? compiled_loss(x, y) : model.loss(x, y);
    }
    opt.zero_grad();
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    if (o.grad_clip > 0) optim::clip_grad_norm_(params, o.grad_clip);
    scaler.step(opt);
    scaler.update();
    // The loss is read (which waits for the device) only every log_interval iterations, before
    // an evaluation, at the last iteration and around compiling, as nanoGPT reads it: between
    // reads the host queues the next steps while the device runs these.
    pending.push_back({iter, loss.detach(), lr});
    const bool probing = o.compile && !use_compiled;
    const bool first_compiled = use_compiled && !compile_reported;
    const bool read = probing || first_compiled || iter % o.log_interval == 0 ||
                      iter + 1 >= o.max_iters || (iter + 1) % o.eval_interval == 0;
    double lossf = NAN;
    std::vector<double> losses;
    if (read) {
      losses = read_losses(pending);
      lossf = losses.back();
    }
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    unread_ms += ms;
    if (read) {
      // Each row gets the mean time of the steps read together (one step's own time is not
      // known without waiting for it).
      const double row_ms = unread_ms / double(pending.size());
      for (size_t i = 0; i < pending.size(); ++i) {
        EMBER_CHECK(std::isfinite(losses[i]), "training diverged: loss is ", losses[i],
                    " at iter ", pending[i].iter, "; try a lower --lr");
        csv << pending[i].iter << "," << losses[i] << ",," << pending[i].lr << "," << row_ms
            << "\n";
      }
      pending.clear();
      unread_ms = 0;
    }
    ++steps_done;
    if (probing && iter > first_iter) {  // the first eager step warms up
      probe_ms += ms;
      ++probe_n;
    }
    if (use_compiled && compile_reported) {
      compiled_ms += ms;
      ++compiled_n;
    }
    if (first_compiled) {
      // The first step traces, builds the joint graph and compiles both halves (or finds them
      // in the disk cache): reported once and kept out of the ms/iter figures.
      compile_reported = true;
      if (!o.quiet) {
        std::printf("compiled the training step (forward + backward + AdamW) in %.2f s\n",
                  ms / 1000.0);
        std::fflush(stdout);
      }
      continue;
    }
    interval_ms += ms;
    ++interval_n;
    train_ms_total += ms;
    if (!o.quiet && (iter % o.log_interval == 0 || iter + 1 == o.max_iters)) {
      double avg = interval_ms / double(interval_n);
      double tok_s = double(o.batch_size * o.block_size * world) / (avg / 1000.0);
      double eta = avg / 1000.0 * double(o.max_iters - iter - 1);
      std::printf("iter %lld/%lld: loss %.4f, lr %.2e, %.1f ms/iter, %.0f tok/s, ETA %s\n",
                  (long long)iter, (long long)o.max_iters, lossf, lr, avg, tok_s,
                  duration_str(eta).c_str());
      std::fflush(stdout);
      interval_ms = 0;
      interval_n = 0;
    }
  }
  if (master) {
    csv.flush();
    write_loss_plot(csv_path, o.out_dir + "/loss.svg");
  }
  if (probe_n > 0 && compiled_n > 0) {
    const double e = probe_ms / double(probe_n), c = compiled_ms / double(compiled_n);
    std::printf("speed: eager %.1f ms/iter (iterations %lld-%lld), compiled %.1f ms/iter (the "
                "remaining %lld): %.2fx\n",
                e, (long long)(first_iter + 1), (long long)(first_iter + probe_n), c,
                (long long)compiled_n, e / c);
  }
  if (amp == DType::Float16)
    std::printf("float16 loss scaling: %lld steps skipped for inf/NaN grads, final scale %g\n",
                (long long)scaler.skipped_steps(), scaler.get_scale());
  const int64_t timed = steps_done - (compile_reported ? 1 : 0);  // the compiling step: untimed
  double wall = std::chrono::duration<double>(Clock::now() - t_start).count();
  std::printf("done: %lld iterations in %s (%.1f ms/iter training); best val loss %.4f; "
              "checkpoints in %s\n",
              (long long)steps_done, duration_str(wall).c_str(),
              timed ? train_ms_total / double(timed) : 0.0, best_val, o.out_dir.c_str());
  return 0;
}

}  // namespace ember::app
