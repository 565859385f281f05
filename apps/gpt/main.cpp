// ember-gpt command line: `train` and `sample`, with nanoGPT's flag names.
#include <CLI/CLI.hpp>
#include <iostream>

#include "ember/error.h"
#include "gpt/gpt_app.h"

int main(int argc, char** argv) {
  using namespace ember::app;
  CLI::App app{"ember-gpt: train and sample a character-level GPT (nanoGPT's architecture)"};
  app.require_subcommand(1);

  TrainOptions t;
  CLI::App* train = app.add_subcommand("train", "train a GPT on a text file");
  train->add_option("--data", t.data, "text file (default: the shipped tinyshakespeare.txt)");
  train->add_option("--out_dir", t.out_dir, "where checkpoints, meta and loss.csv go")->capture_default_str();
  train->add_option("--init_from", t.init_from, "scratch | resume (from out_dir/ckpt.safetensors)")
      ->check(CLI::IsMember({"scratch", "resume"}))->capture_default_str();
  train->add_option("--n_layer", t.n_layer)->capture_default_str();
  train->add_option("--n_head", t.n_head)->capture_default_str();
  train->add_option("--n_embd", t.n_embd)->capture_default_str();
  train->add_option("--block_size", t.block_size)->capture_default_str();
  train->add_option("--batch_size", t.batch_size)->capture_default_str();
  train->add_option("--max_iters", t.max_iters)->capture_default_str();
  train->add_option("--eval_interval", t.eval_interval)->capture_default_str();
  train->add_option("--eval_iters", t.eval_iters)->capture_default_str();
  train->add_option("--log_interval", t.log_interval)->capture_default_str();
  train->add_option("--lr,--learning_rate", t.lr)->capture_default_str();
  train->add_option("--min_lr", t.min_lr)->capture_default_str();
  train->add_option("--warmup_iters", t.warmup_iters)->capture_default_str();
  train->add_option("--lr_decay_iters", t.lr_decay_iters)->capture_default_str();
  train->add_option("--dropout", t.dropout)->capture_default_str();
  train->add_option("--bias", t.bias, "biases in Linear and LayerNorm")->capture_default_str();
  train->add_option("--weight_decay", t.weight_decay)->capture_default_str();
  train->add_option("--beta1", t.beta1)->capture_default_str();
  train->add_option("--beta2", t.beta2)->capture_default_str();
  train->add_option("--grad_clip", t.grad_clip, "clip the global grad norm (0: off)")->capture_default_str();
  train->add_option("--seed", t.seed)->capture_default_str();
  train->add_flag("--always_save_checkpoint", t.always_save_checkpoint,
                  "write best.safetensors at every eval, not only when val loss improves");
  train->add_option("--compile", t.compile,
                    "compile the training step (model.loss, its backward and the AdamW step) "
                    "into generated code; evaluation runs it too, without grad")->capture_default_str();
  train->add_option("--eager_probe_iters", t.eager_probe_iters,
                    "with --compile true: run the first N iterations eager and report both "
                    "speeds")
      ->capture_default_str();
  train->add_option("--device", t.device, "cpu, cuda or cuda:N")->capture_default_str();
  train->add_option("--dtype", t.dtype,
                    "auto (bfloat16 autocast on a GPU, float32 on the CPU), bfloat16, float16 "
                    "(with loss scaling) or float32")
      ->capture_default_str();
  train->add_flag("--quiet", t.quiet, "only the final summary");

  SampleOptions s;
  CLI::App* sample = app.add_subcommand("sample", "sample text from a trained checkpoint");
  sample->add_option("--out_dir", s.out_dir)->capture_default_str();
  sample->add_option("--checkpoint", s.checkpoint,
                     "checkpoint file (default: out_dir/best.safetensors, else ckpt.safetensors)");
  sample->add_option("--start", s.start, "prompt text, or FILE:path")->capture_default_str();
  sample->add_option("--num_samples", s.num_samples)->capture_default_str();
  sample->add_option("--max_new_tokens", s.max_new_tokens)->capture_default_str();
  sample->add_option("--temperature", s.temperature)->capture_default_str();
  sample->add_option("--top_k", s.top_k, "keep the k most likely tokens (0: all)")->capture_default_str();
  sample->add_option("--seed", s.seed)->capture_default_str();
  sample->add_option("--device", s.device, "cpu, cuda or cuda:N")->capture_default_str();
  sample->add_option("--dtype", s.dtype,
                     "the weights' dtype: auto (bfloat16 on a GPU, float32 on the CPU), "
                     "bfloat16, float16 or float32")
      ->capture_default_str();
  sample->add_option("--compile", s.compile,
                     "compile the decode step over a key/value cache preallocated to the block "
                     "(one trace serves every position) and, past the block, the forward; "
                     "reports tokens/s and the compiles")
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*train) return run_train(t);
    if (*sample) return run_sample(s);
  } catch (const ember::Error& e) {
    std::cerr << "ember-gpt: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
