"""Samples text from the model train.py saved (out_dir/model.safetensors and meta.json), in the
shape of nanoGPT's sample.py. Settings as --name=value:

    python examples/nanogpt/sample.py --start="ROMEO:" --max_new_tokens=300"""
import json
import os
import sys

import ember

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import GPT, GPTConfig  # noqa: E402
from train_settings import apply_overrides  # noqa: E402

out_dir = "out-nanogpt-py"
start = "\n"
num_samples, max_new_tokens, top_k = 1, 500, 200
temperature = 0.8
seed = 1337
device = "cpu"
compile = False

apply_overrides(sys.argv[1:], globals())

with open(os.path.join(out_dir, "meta.json")) as f:
    meta = json.load(f)
chars = meta["chars"]
stoi = {c: i for i, c in enumerate(chars)}
model = GPT(GPTConfig(**meta["config"]))
model.load_state_dict(ember.safetensors.load_file(os.path.join(out_dir, "model.safetensors")))
model.eval().to(device)
ember.manual_seed(seed)
logits_of = ember.compile(lambda ctx: model(ctx)[0]) if compile else None

idx = ember.tensor([[stoi[c] for c in start]], dtype=ember.int64, device=device)
for _ in range(num_samples):
    out = model.generate(idx, max_new_tokens, temperature=temperature, top_k=top_k,
                         logits_of=logits_of)
    print("".join(chars[i] for i in out[0].tolist()))
    print("---------------")
