"""Trains the character-level GPT of model.py on the shipped Shakespeare text, in the shape of
nanoGPT's train.py: AdamW with weight decay on the 2-D parameters, linear warmup then cosine
decay of the learning rate, gradient clipping, train/val loss every eval_interval iterations,
and a checkpoint (safetensors) of the best model. The defaults are the CPU configuration that
`ember-gpt train` uses. Settings are overridden as --name=value:

    python examples/nanogpt/train.py --max_iters=500 --compile=False

With compile on, the loss (forward, and the backward it records) runs as one compiled call per
iteration, and AdamW's update as one compiled function. Python does a fixed handful of calls per
iteration, independent of the model's size.

The data, the batches (batches.py: ember.data's TokenDataset, ember-gpt's sampler) and the
starting weights (model.py) are those of `ember-gpt train` for the same seed and settings, so
the two runs train on the same batches from the same model."""
import json
import os
import sys
import time

import ember

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from batches import CharBatches  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from train_settings import apply_overrides  # noqa: E402

# ---- settings (ember-gpt train's defaults) ----
data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data",
                    "tinyshakespeare.txt")
out_dir = "out-nanogpt-py"
n_layer, n_head, n_embd, block_size = 4, 4, 128, 64
dropout, bias = 0.0, True
batch_size, max_iters, eval_interval, eval_iters, log_interval = 12, 2000, 250, 20, 10
learning_rate, min_lr, warmup_iters, lr_decay_iters = 1e-3, 1e-4, 100, 2000
weight_decay, beta1, beta2, grad_clip = 0.1, 0.9, 0.99, 1.0
seed = 1337
device = "cpu"
compile = True
save_checkpoint = True


apply_overrides(sys.argv[1:], globals())

# ---- data: characters as tokens, the first 90% for training (out_dir/data, as ember-gpt) ----
batches = CharBatches(data, out_dir, batch_size, block_size, seed, device)
chars = batches.tokenizer.chars

# ---- model and optimizer ----
ember.manual_seed(seed)
config = GPTConfig(block_size=block_size, vocab_size=len(chars), n_layer=n_layer,
                   n_head=n_head, n_embd=n_embd, dropout=dropout, bias=bias)
model = GPT(config).to(device)
optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2),
                                       compiled=compile)
params = list(model.parameters())


def loss_of(x, y):
    return model(x, y)[1]


train_loss = ember.compile(loss_of) if compile else loss_of


@ember.no_grad()
def estimate_loss():
    """Mean loss over eval_iters batches of each split, in eval mode (the same batches at every
    evaluation)."""
    model.eval()
    out = {}
    for split in ("train", "val"):
        out[split] = sum(loss_of(*batches.eval_batch(split, k)).item()
                         for k in range(eval_iters)) / eval_iters
    model.train()
    return out


print(f"model: {n_layer} layers, {n_head} heads, {n_embd} embd, block {block_size}, "
      f"vocab {len(chars)}: {model.num_params() / 1e6:.2f}M parameters; compile={compile}")
best_val, first_below = float("inf"), None
timed_ms, timed_n, interval_ms, interval_n = 0.0, 0, 0.0, 0
t_start = time.time()
for it in range(max_iters + 1):
    lr = ember.optim.cosine_lr(it, learning_rate, min_lr, warmup_iters, lr_decay_iters)
    for g in optimizer.param_groups:
        g["lr"] = lr
    if it % eval_interval == 0 or it == max_iters:
        losses = estimate_loss()
        print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}",
              flush=True)
        if losses["val"] <= 1.90 and first_below is None:
            first_below = it
        if losses["val"] < best_val:
            best_val = losses["val"]
            if save_checkpoint and it > 0:
                ember.safetensors.save_file(model.state_dict(), os.path.join(out_dir, "model.safetensors"))
                with open(os.path.join(out_dir, "meta.json"), "w") as f:
                    json.dump({"config": vars(config), "chars": chars}, f)
    if it == max_iters:
        break
    t0 = time.perf_counter()
    x, y = batches.train_batch(it)
    loss = train_loss(x, y)
    optimizer.zero_grad()
    loss.backward()
    if grad_clip > 0:
        ember.nn.utils.clip_grad_norm_(params, grad_clip)
    optimizer.step()
    lossf = loss.item()
    ms = (time.perf_counter() - t0) * 1000
    if it == 0 and compile:  # the first call traces and compiles: reported, not timed
        print(f"compiled the training step in {ms / 1000:.2f} s", flush=True)
        continue
    timed_ms, timed_n = timed_ms + ms, timed_n + 1
    interval_ms, interval_n = interval_ms + ms, interval_n + 1
    if it % log_interval == 0:
        print(f"iter {it}/{max_iters}: loss {lossf:.4f}, lr {lr:.2e}, "
              f"{interval_ms / interval_n:.1f} ms/iter", flush=True)
        interval_ms, interval_n = 0.0, 0
print(f"done: {max_iters} iterations in {time.time() - t_start:.1f} s "
      f"({timed_ms / max(timed_n, 1):.1f} ms/iter training); best val loss {best_val:.4f}; "
      f"val <= 1.90 first at iter {first_below}")
