// ember-gpt: train and sample nanoGPT-style character models. Shared option structs.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "ember/device.h"
#include "ember/dtype.h"

namespace ember::app {

struct TrainOptions {
  // data
  std::string data = "";  // text file; default: the shipped data/tinyshakespeare.txt
  std::string out_dir = "out-shakespeare-char";
  std::string init_from = "scratch";  // scratch | resume
  // model
  int64_t n_layer = 4, n_head = 4, n_embd = 128, block_size = 64;
  double dropout = 0.0;
  bool bias = true;
  // training
  int64_t batch_size = 12, max_iters = 2000, eval_interval = 250, eval_iters = 20;
  int64_t log_interval = 10;
  double lr = 1e-3, min_lr = 1e-4;
  int64_t warmup_iters = 100, lr_decay_iters = 2000;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.99, grad_clip = 1.0;
  uint64_t seed = 1337;
  bool compile = false;
  // With compile: the first N iterations run eager, so both speeds are measured in one run.
  int64_t eager_probe_iters = 0;
  bool always_save_checkpoint = false;
  std::string device = "cpu";
  // auto: bfloat16 autocast on a GPU, float32 on the CPU; or bfloat16 | float16 (with loss
  // scaling) | float32.
  std::string dtype = "auto";
  bool quiet = false;
};

struct SampleOptions {
  std::string out_dir = "out-shakespeare-char";
  std::string checkpoint = "";  // default: out_dir/best.safetensors, else ckpt.safetensors
  std::string start = "\n";
  int64_t num_samples = 1, max_new_tokens = 500, top_k = 200;
  double temperature = 0.8;
  uint64_t seed = 1337;
  std::string device = "cpu";
  bool compile = false;  // the forward compiled: code shared over the growing context
  std::string dtype = "auto";  // the weights' dtype: auto is bfloat16 on a GPU, float32 on the CPU
};

int run_train(const TrainOptions& o);
// The device --device names, checked to be usable (a GPU present for cuda).
Device app_device(const std::string& name);
// The autocast dtype --dtype asks for on `device` (none: float32 throughout).
std::optional<DType> app_autocast(const std::string& dtype, Device device);
int run_sample(const SampleOptions& o);
std::string default_data_path();

}  // namespace ember::app
