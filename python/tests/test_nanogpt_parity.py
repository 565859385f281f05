"""examples/nanogpt against `ember-gpt train` (the C++ program, from the build dir that
scripts/test.sh builds, or $EMBER_GPT): for the same seed and settings, train.py's pieces
(model.py's initialization, batches.py's batches, the AdamW step) give the weights ember-gpt
writes in its checkpoints."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import ember

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
EXAMPLE = os.path.join(ROOT, "examples", "nanogpt")
EMBER_GPT = os.environ.get("EMBER_GPT", os.path.join(ROOT, "build", "apps", "ember-gpt"))
SIZES = dict(n_layer=2, n_head=2, n_embd=32, block_size=16)
SEED, BATCH, EVAL_ITERS, LR = 4321, 4, 3, 1e-2

pytestmark = pytest.mark.skipif(not os.access(EMBER_GPT, os.X_OK),
                                reason=f"no ember-gpt at {EMBER_GPT} (set EMBER_GPT)")


def example(name):
    sys.path.insert(0, EXAMPLE)
    try:
        return __import__(name)
    finally:
        sys.path.remove(EXAMPLE)


@pytest.fixture
def text(tmp_path):
    with open(os.path.join(ROOT, "data", "tinyshakespeare.txt"), encoding="utf-8") as f:
        path = tmp_path / "text.txt"
        path.write_text(f.read()[:30000], encoding="utf-8")
    return str(path)


def ember_gpt(text, out_dir, max_iters):
    """Runs ember-gpt train eagerly; returns its model weights at the end and its printed
    losses at step 0."""
    args = [EMBER_GPT, "train", "--data", text, "--out_dir", str(out_dir), "--seed", str(SEED),
            "--batch_size", str(BATCH), "--eval_iters", str(EVAL_ITERS), "--max_iters",
            str(max_iters), "--lr", str(LR), "--warmup_iters", "0", "--compile", "false"]
    for k, v in SIZES.items():
        args += [f"--{k}", str(v)]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    losses = re.search(r"step 0: train loss ([0-9.]+), val loss ([0-9.]+)", out).groups()
    ckpt = ember.safetensors.load_file(os.path.join(out_dir, "ckpt.safetensors"))
    weights = {k[len("model."):]: v.numpy() for k, v in ckpt.items() if k.startswith("model.")}
    return weights, [float(v) for v in losses]


def python_model(text, out_dir):
    GPT, GPTConfig = example("model").GPT, example("model").GPTConfig
    batches = example("batches").CharBatches(text, str(out_dir), BATCH, SIZES["block_size"],
                                             SEED)
    ember.manual_seed(SEED)
    model = GPT(GPTConfig(vocab_size=batches.tokenizer.vocab_size, **SIZES))
    return model, batches


def test_initial_weights_and_eval_batches_match_ember_gpt(text, tmp_path):
    cpp, (cpp_train, cpp_val) = ember_gpt(text, tmp_path / "cpp", 0)
    model, batches = python_model(text, tmp_path / "py")
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    assert set(state) == set(cpp)
    for name, w in cpp.items():
        np.testing.assert_array_equal(state[name], w, err_msg=name)
    model.eval()
    with ember.no_grad():
        train, val = (sum(model(*batches.eval_batch(s, k))[1].item()
                          for k in range(EVAL_ITERS)) / EVAL_ITERS for s in ("train", "val"))
    assert train == pytest.approx(cpp_train, abs=2e-4)
    assert val == pytest.approx(cpp_val, abs=2e-4)


def step_once(model, batches, it):
    opt = model.configure_optimizers(0.1, LR, (0.9, 0.99))
    for g in opt.param_groups:
        g["lr"] = ember.optim.cosine_lr(0, LR, 1e-4, 0, 2000)
    x, y = batches.train_batch(it)
    loss = model(x, y)[1]
    opt.zero_grad()
    loss.backward()
    ember.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def test_first_training_step_matches_ember_gpt(text, tmp_path):
    cpp, _ = ember_gpt(text, tmp_path / "cpp", 1)

    def mismatched(state):  # the fraction of weights that moved another way than ember-gpt's
        bad = sum(int((np.abs(state[k] - w) > LR / 10).sum()) for k, w in cpp.items())
        return bad / sum(w.size for w in cpp.values())

    model, batches = python_model(text, tmp_path / "py")
    # AdamW's first step moves each weight by about lr, in the direction of its gradient's
    # sign: the same batch moves almost every weight as ember-gpt did.
    assert mismatched(step_once(model, batches, 0)) < 0.005
    model, batches = python_model(text, tmp_path / "py")
    assert mismatched(step_once(model, batches, 1)) > 0.05  # another batch does not
