"""A few training steps of examples/nanogpt's model (compiled loss, AdamW) lower the loss."""
import os
import sys

import numpy as np

import ember

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "nanogpt")


def test_example_gpt_trains():
    sys.path.insert(0, EXAMPLE)
    try:
        from model import GPT, GPTConfig
    finally:
        sys.path.remove(EXAMPLE)
    cfg = GPTConfig(block_size=16, vocab_size=11, n_layer=2, n_head=2, n_embd=32)
    model = GPT(cfg)
    names = [n for n, _ in model.named_parameters()]
    assert names[0] == "transformer.wte.weight" and "lm_head.weight" not in names
    assert "lm_head.weight" in model.state_dict()
    opt = model.configure_optimizers(0.1, 3e-3, (0.9, 0.99), compiled=True)
    step = ember.compile(lambda x, y: model(x, y)[1])
    # A repeating sequence: the next token is predictable.
    data = np.arange(200, dtype=np.int64) % cfg.vocab_size
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(30):
        s = rng.integers(0, len(data) - 17, size=4)[:, None] + np.arange(17)
        x, y = ember.from_numpy(data[s][:, :-1].copy()), ember.from_numpy(data[s][:, 1:].copy())
        loss = step(x, y)
        opt.zero_grad()
        loss.backward()
        ember.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    assert losses[0] > 2.0 and np.mean(losses[-5:]) < 0.6 * losses[0]
    assert step.stats()["traces"] == 1
    out = model.generate(ember.tensor([[1, 2]]), 5, top_k=3)
    assert out.shape == (1, 7)
