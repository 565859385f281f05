#!/usr/bin/env python3
"""The CUDA rows of ember-bench, run in PyTorch on the same card, and the ratios between them.

Runs `ember-bench --filter cuda/` (the C++ rows), then the same workloads in PyTorch eager, and
prints one JSON object per line: ember's rows, PyTorch's rows ("framework": "torch"), and one
"ratio" row per workload (ember time / torch time, lower is better for ember; and each side's
fraction of its own reference where the row has one). Every figure comes from this one run on
this one machine.

The compiled rows (cuda/fused_*, cuda/compiled_*, cuda/gpt_forward*,
cuda/gpt_train_step_compiled_bf16, cuda/gpt_train_step_gpt2_bf16) time each workload eager and
compiled on both sides: ember::compile against torch.compile (default mode; the GPT training
step compiles the model and the AdamW step, as ember compiles model.loss and
AdamW::set_compiled). compile_s is torch.compile's first call, cold: dynamo reset, and
Inductor's and Triton's disk caches in a new directory for the run. The ratio rows then give
eager over eager (ember_over_torch) and compiled over compiled (compiled_ember_over_torch).
--no-torch-compile skips torch.compile (its compiled fields are null). --variant NAME:VAR=VALUE
(repeatable) measures ember's rows again with those environment variables set (the switches of
docs/architecture.md, EMBER_GEMV_COLUMNS=0 and the like): its rows and ratio rows carry
"variant": NAME, against the same torch rows; a variant whose run fails is named on stderr and
left out. --profile prints, for
each compiled GPT step, torch.profiler's table of its kernels by GPU time to stderr (ember's
side of that: EMBER_BENCH_COMPILED_ONLY=1 EMBER_PROFILE_OPS=shapes ember-bench --filter ROW).

cuda/gpt_forward_gpt2_b1_bf16 times GPT-2 124M in bfloat16 weights (no autocast), no grad, on one
sequence of 128 tokens: eager, torch.compile, and torch.compile(mode="reduce-overhead") (CUDA
graphs: reduce_overhead_ms; reduce_overhead_compile_s is its first two calls, the second
recording the graph, as ember-bench times its own). cuda/gpt_decode_gpt2_bf16 decodes greedily
500 tokens (50 with --quick) after a 128-token prompt, the same model: torch's reference is a
key/value-cache loop (KVDecoder: the prompt through the blocks once, then one step a token with
the position a device tensor) whose step is compiled fullgraph with mode="reduce-overhead"
(tokens_per_s and compiled_ms, the prompt not counted), also timed eager and compiled in the
default mode. Its ratio row adds decode_speedup (ember's tokens/s over torch's); rows with
reduce_overhead_ms on both sides add reduce_overhead_ember_over_torch.

usage: bench/compare_torch.py [--ember PATH] [--quick] [--repeat N] [--only REGEX]
                              [--no-torch-compile] [--profile]
       bench/compare_torch.py --train-run ITERS [--gpt PATH] [--no-ember-compile]

--train-run trains nanoGPT's shakespeare_char recipe for ITERS iterations twice, with
`ember-gpt train --device cuda --compile true` (bfloat16 autocast; --no-ember-compile: eager)
and with the same model and loop in PyTorch (bfloat16 autocast, eager), and prints each one's
wall time (evaluations included), ms per iteration and best val loss, and their ratio.
"""
import argparse
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

DEV = "cuda:0"


def gpu_ms(fn, repeat, inner=1, warmup=2):
    """Median wall ms of `inner` calls of fn, the device synchronized around each batch."""
    for _ in range(warmup):
        for _ in range(inner):
            fn()
        torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return times[len(times) // 2] / inner


def pair_ms(eager, compiled, repeat, rounds=3, inner=1):
    """Eager against compiled as ember-bench times them: `rounds` rounds of gpu_ms of each, each
    side's best round. compiled may be None (its time is then None)."""
    te = tc = math.inf
    for _ in range(rounds):
        te = min(te, gpu_ms(eager, repeat, inner))
        if compiled:
            tc = min(tc, gpu_ms(compiled, repeat, inner))
    return te, (tc if compiled else None)


def seconds_of(fn):
    """Wall seconds of one call of fn, the device synchronized before and after."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def host_ms(fn, repeat=5):
    """Median wall ms to queue one call of fn, the device idle at its start: near fn's device
    time, the GPU waits on the host."""
    times = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    torch.cuda.synchronize()
    times.sort()
    return times[len(times) // 2]


def peak_mb(fn):
    """Peak allocated MB over one call of fn, above what was allocated before it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 1e6


def compiled_pair(fn, args, repeat, use_compile):
    """fn(*args) eager and under torch.compile: (eager_ms, compiled_ms, compile_s), the last two
    None without torch.compile."""
    compiled, compile_s = None, None
    if use_compile:
        torch._dynamo.reset()
        cfn = torch.compile(fn)
        compiled = lambda: cfn(*args)
        compile_s = seconds_of(compiled)
    ms, cms = pair_ms(lambda: fn(*args), compiled, repeat)
    return ms, cms, compile_s


def copy_ms(nbytes, repeat):
    src = torch.empty(nbytes, dtype=torch.uint8, device=DEV)
    dst = torch.empty_like(src)
    return gpu_ms(lambda: dst.copy_(src), repeat)


def row(name, ms, **extra):
    r = {"name": name, "device": DEV, "framework": "torch", "eager_ms": ms}
    r.update(extra)
    return r


def bandwidth_row(name, ms, nbytes, repeat):
    ref = copy_ms(int(nbytes // 2), repeat)
    return row(name, ms, gbps=nbytes / (ms * 1e6), copy_gbps=nbytes / (ref * 1e6),
               fraction_of_copy=ref / ms)


def compiled_bandwidth_row(name, fn, args, nbytes, repeat, use_compile):
    """A bandwidth row of fn(*args) eager and compiled: gbps and fraction_of_copy of the compiled
    time (null without torch.compile), eager_fraction_of_copy of the eager time."""
    ms, cms, compile_s = compiled_pair(fn, args, repeat, use_compile)
    ref = copy_ms(int(nbytes // 2), repeat)
    return row(name, ms, compiled_ms=cms, compile_s=compile_s,
               gbps=nbytes / (cms * 1e6) if cms else None, copy_gbps=nbytes / (ref * 1e6),
               fraction_of_copy=ref / cms if cms else None, eager_fraction_of_copy=ref / ms)


# ---- a GPT with nanoGPT's architecture, for the GPT rows ----

class Block(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)
        self.heads, self.dropout = heads, dropout
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        x = x + self.drop(self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d)))
        return x + self.drop(self.proj(F.gelu(self.fc(self.ln_2(x)))))


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, d, dropout):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([Block(d, heads, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx, targets=None):
        """The mean cross entropy against targets; the logits without them."""
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for b in self.h:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


# The GPT shapes of ember-bench's cuda rows, by row-name suffix: nanoGPT's shakespeare_char and
# GPT-2 124M (dropout: in the training rows).
GPT_SHAPES = {
    "": dict(vocab=65, block=256, layers=6, heads=6, d=384, batch=64, quick_batch=8, dropout=0.2),
    "_gpt2": dict(vocab=50304, block=1024, layers=12, heads=12, d=768, batch=16, quick_batch=2,
                  dropout=0.0),
}


def gpt_setup(shape, quick, dropout):
    """A model of `shape` on the device with its AdamW (nanoGPT's groups), inputs and targets."""
    s = GPT_SHAPES[shape]
    vocab, block, batch = s["vocab"], s["block"], s["quick_batch" if quick else "batch"]
    torch.manual_seed(1)
    model = GPT(vocab, block, s["layers"], s["heads"], s["d"], dropout).to(DEV)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99), fused=False, foreach=True)
    x = torch.randint(0, vocab, (batch, block), device=DEV)
    y = torch.randint(0, vocab, (batch, block), device=DEV)
    return model, opt, x, y


def gpt_step_row(name, quick, repeat, dtype):
    model, opt, x, y = gpt_setup("", quick, 0.2)
    batch = x.shape[0]
    params = list(model.parameters())

    def step():
        with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    ms = gpu_ms(step, repeat)
    peak = torch.cuda.max_memory_allocated() - before
    return row(name, ms, peak_mb=peak / 1e6, tokens_per_s=batch * 256 / (ms / 1000),
               note=f"{str(dtype).replace('torch.', '')}, eager")


def gpt_forward_row(name, shape, quick, repeat, use_compile):
    """Eval forward (no grad, bfloat16 autocast) to the logits, eager and compiled."""
    model, _, x, _ = gpt_setup(shape, quick, 0.0)
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        ms, cms, compile_s = compiled_pair(model, (x,), repeat, use_compile)
    tokens = x.numel()
    return row(name, ms, compiled_ms=cms, compile_s=compile_s,
               tokens_per_s=tokens / (cms / 1000) if cms else None,
               note="eval forward, no grad, bfloat16 autocast")


def gpt_compiled_step_row(name, shape, quick, repeat, use_compile):
    """The bfloat16 training step eager and with torch.compile of the model and of the AdamW
    step (as the PyTorch recipe compiles an optimizer); grad clipping eager on both."""
    model, opt, x, y = gpt_setup(shape, quick, GPT_SHAPES[shape]["dropout"])
    params = list(model.parameters())

    def step(m, opt_step):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = m(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt_step()

    eager = lambda: step(model, opt.step)
    eager()
    compiled, compile_s = None, None
    if use_compile:
        torch._dynamo.reset()
        cmodel = torch.compile(model)

        @torch.compile
        def opt_step():
            opt.step()

        compiled = lambda: step(cmodel, opt_step)
        compile_s = seconds_of(compiled)
    ms, cms = pair_ms(eager, compiled, repeat)
    if PROFILE and compiled:
        print_kernel_table(name, compiled)
    tokens = x.numel()
    return row(name, ms, compiled_ms=cms, compile_s=compile_s,
               tokens_per_s=tokens / (cms / 1000) if cms else None,
               eager_tokens_per_s=tokens / (ms / 1000), host_ms=host_ms(eager),
               compiled_host_ms=host_ms(compiled) if compiled else None,
               eager_peak_mb=peak_mb(eager),
               compiled_peak_mb=peak_mb(compiled) if compiled else None,
               note="bfloat16 autocast; compiled: torch.compile(model), torch.compile(opt.step)")


PROFILE = False  # --profile: the compiled steps' kernels by GPU time, to stderr


def print_kernel_table(name, fn, steps=3):
    """torch.profiler's table of the kernels of `steps` calls of fn, by total GPU time."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    table = None
    for key in ("self_device_time_total", "self_cuda_time_total"):
        try:
            table = prof.key_averages().table(sort_by=key, row_limit=50, max_name_column_width=90)
            break
        except (AttributeError, KeyError, ValueError):
            continue
    print(f"[profile] {name}: {steps} compiled steps\n{table}", file=sys.stderr, flush=True)


# ---- GPT-2 124M at batch 1 in bfloat16 weights: a forward and greedy decoding ----

def gpt2_bf16():
    """GPT-2 124M (dropout 0) on the device, its weights in bfloat16, in eval mode."""
    s = GPT_SHAPES["_gpt2"]
    torch.manual_seed(1)
    model = GPT(s["vocab"], s["block"], s["layers"], s["heads"], s["d"], 0.0).to(DEV)
    return model.to(torch.bfloat16).eval()


def new_step(fn):
    """fn, each call a new CUDA graph step: a torch.compile(mode="reduce-overhead") function then
    overwrites its last outputs on the next call, which its callers no longer read."""
    def call(*args):
        torch.compiler.cudagraph_mark_step_begin()
        return fn(*args)
    return call


def gpt_forward_b1_row(name, repeat, use_compile):
    """Eval forward of one sequence of 128 tokens to its logits, GPT-2 124M in bfloat16 weights
    (no autocast), no grad: eager, compiled, and compiled with mode "reduce-overhead". The
    second compile may find some of its kernels built by the first."""
    model = gpt2_bf16()
    torch.manual_seed(1)
    x = torch.randint(0, GPT_SHAPES["_gpt2"]["vocab"], (1, 128), device=DEV)
    inner = 20  # a forward is about a millisecond: time them in runs
    compiled = ro_ms = compile_s = ro_compile_s = None
    with torch.no_grad():
        model(x)
        if use_compile:
            torch._dynamo.reset()
            forward = torch.compile(model)
            compiled = lambda: forward(x)
            compile_s = seconds_of(compiled)
        ms, cms = pair_ms(lambda: model(x), compiled, repeat, inner=inner)
        if use_compile:
            torch._dynamo.reset()
            graphed = new_step(torch.compile(model, mode="reduce-overhead"))

            def first_calls():
                # The first call compiles and runs the graph without CUDA graphs, the second
                # records the CUDA graph; later calls replay it.
                graphed(x)
                graphed(x)

            ro_compile_s = seconds_of(first_calls)
            for _ in range(3):
                graphed(x)
            ro_ms = gpu_ms(lambda: graphed(x), repeat, inner=inner)
    return row(name, ms, compiled_ms=cms, reduce_overhead_ms=ro_ms, compile_s=compile_s,
               reduce_overhead_compile_s=ro_compile_s,
               note="batch 1, 128 tokens, bfloat16 weights (no autocast), no grad; "
                    "reduce_overhead_ms: torch.compile(mode=\"reduce-overhead\")")


class KVDecoder:
    """Greedy decoding of a GPT (batch 1) with a key/value cache of its whole block, its forward
    left as it is. prefill(idx) runs a prompt [1, T] through the blocks, writes its keys and
    values at positions 0..T-1, and gives the last position's logits [1, 1, vocab]. step(idx,
    pos) runs one token (idx [1, 1]) at position pos (a [1] int64 tensor on the device): writes
    its key and value into the cache in place, attends over the whole cache with the positions
    after pos masked, and gives its logits [1, 1, vocab]. No shape or Python number depends on
    pos, so a compiled step is one graph for every position."""

    def __init__(self, model):
        self.model = model
        w = model.wpe.weight
        block, d = w.shape
        heads = model.h[0].heads
        shape = (1, heads, block, d // heads)
        self.k = [torch.zeros(shape, dtype=w.dtype, device=w.device) for _ in model.h]
        self.v = [torch.zeros(shape, dtype=w.dtype, device=w.device) for _ in model.h]
        self.slots = torch.arange(block, device=w.device)
        # The cache keeps its addresses: CUDA graphs then read and write it where it is, with no
        # copy in or out at each replay.
        for t in self.k + self.v + [self.slots]:
            torch._dynamo.mark_static_address(t)

    @staticmethod
    def qkv(blk, x):
        """Block blk's queries, keys and values of x [b, t, d], each [b, heads, t, d / heads]."""
        b, t, d = x.shape
        q, k, v = blk.c_attn(blk.ln_1(x)).split(d, dim=2)
        shape = (b, t, blk.heads, d // blk.heads)
        return (q.view(shape).transpose(1, 2), k.view(shape).transpose(1, 2),
                v.view(shape).transpose(1, 2))

    @staticmethod
    def rest(blk, x, y):
        """The rest of block blk after its attention y [b, heads, t, d / heads] of x."""
        b, t, d = x.shape
        x = x + blk.c_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + blk.proj(F.gelu(blk.fc(blk.ln_2(x))))

    def prefill(self, idx):
        m = self.model
        t = idx.shape[1]
        assert idx.shape[0] == 1 and t <= self.slots.numel()
        x = m.wte(idx) + m.wpe(torch.arange(t, device=idx.device))
        for blk, kc, vc in zip(m.h, self.k, self.v):
            q, k, v = self.qkv(blk, x)
            kc[:, :, :t] = k
            vc[:, :, :t] = v
            x = self.rest(blk, x, F.scaled_dot_product_attention(q, k, v, is_causal=True))
        return m.lm_head(m.ln_f(x[:, -1:]))

    def step(self, idx, pos):
        m = self.model
        x = m.wte(idx) + m.wpe(pos)
        mask = (self.slots <= pos).view(1, 1, 1, -1)  # the positions written so far, this one's
        for blk, kc, vc in zip(m.h, self.k, self.v):
            q, k, v = self.qkv(blk, x)
            kc.index_copy_(2, pos, k)
            vc.index_copy_(2, pos, v)
            x = self.rest(blk, x, F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask))
        return m.lm_head(m.ln_f(x))


def kv_generate(dec, step, prompt, steps, time_first=False):
    """Greedy decoding after prompt with dec's cache: the prefill's token, then one more a call of
    step(idx, pos), `steps` calls, the tokens kept on the device until the end. Gives the ids
    (steps + 1 of them), the prefill's ms, the seconds of the decode steps, and with time_first
    the seconds of the first step alone (else None)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    idx = dec.prefill(prompt)[:, -1].argmax(-1, keepdim=True)
    pos = torch.full((1,), prompt.shape[1], dtype=torch.long, device=prompt.device)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    first_s = None
    tokens = [idx]
    for i in range(steps):
        logits = step(idx, pos)
        # The argmax is a new tensor: a replay that later overwrites logits leaves it as it is.
        idx = logits[:, -1].argmax(-1, keepdim=True)
        tokens.append(idx)
        pos += 1
        if time_first and i == 0:
            torch.cuda.synchronize()
            first_s = time.perf_counter() - t1
    torch.cuda.synchronize()
    decode_s = time.perf_counter() - t1
    return torch.cat(tokens, 1)[0].tolist(), (t1 - t0) * 1000, decode_s, first_s


def tokens_sha(tokens):
    """The first 12 hex digits of the SHA-1 of the ids written as decimals, one space apart."""
    return hashlib.sha1(" ".join(map(str, tokens)).encode()).hexdigest()[:12]


def gpt_decode_row(name, quick, use_compile):
    """Greedy decoding of GPT-2 124M in bfloat16 weights, no grad, batch 1, with KVDecoder: a
    128-token prompt (not timed in the rates), then 500 decode steps (50 with --quick), eager,
    and the step compiled fullgraph in mode "reduce-overhead" (tokens_per_s, compiled_ms) and in
    the default mode. Each compiled decode is timed after a cold generation (its first step the
    compile: compile_s) and a warm one. "reduce-overhead" compiles first, so that its compile is
    the cold one; the default mode's may then find some of its kernels already built."""
    model = gpt2_bf16()
    s = GPT_SHAPES["_gpt2"]
    prompt_len, steps = 128, (50 if quick else 500)
    assert prompt_len + steps <= s["block"], "the prompt and the new tokens must fit the block"
    torch.manual_seed(1)
    prompt = torch.randint(0, s["vocab"], (1, prompt_len), device=DEV)
    runs = {}
    with torch.no_grad():
        dec = KVDecoder(model)
        # The decoder against the full forward: the prompt's last logits and the next token's.
        first = dec.prefill(prompt)
        idx = first[:, -1].argmax(-1, keepdim=True)
        nxt = dec.step(idx, torch.full((1,), prompt_len, dtype=torch.long, device=DEV))
        full = model(torch.cat([prompt, idx], 1)).float()
        forward_diff = max((first.float() - full[:, -2:-1]).abs().max().item(),
                           (nxt.float() - full[:, -1:]).abs().max().item())
        kv_generate(dec, dec.step, prompt, steps)
        eager_tokens, prefill_ms, eager_s, _ = kv_generate(dec, dec.step, prompt, steps)
        if use_compile:
            for mode in ("reduce-overhead", "default"):
                torch._dynamo.reset()
                step = new_step(torch.compile(dec.step, mode=mode, fullgraph=True))
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                _, _, _, compile_s = kv_generate(dec, step, prompt, steps, time_first=True)
                first_generation_s = time.perf_counter() - t0
                kv_generate(dec, step, prompt, steps)
                tokens, _, decode_s, _ = kv_generate(dec, step, prompt, steps)
                runs[mode] = dict(tokens=tokens, s=decode_s, compile_s=compile_s,
                                  first_generation_s=first_generation_s)
    ro, default = runs.get("reduce-overhead"), runs.get("default")
    shown = ro["tokens"] if ro else eager_tokens

    def agreeing(tokens):
        """How many ids from the first agree with eager decoding's."""
        return next((i for i, (a, b) in enumerate(zip(tokens, eager_tokens)) if a != b),
                    len(tokens))

    return row(name, eager_s * 1000 / steps,
               compiled_ms=ro["s"] * 1000 / steps if ro else None,
               tokens_per_s=steps / ro["s"] if ro else None,
               eager_tokens_per_s=steps / eager_s,
               default_mode_tokens_per_s=steps / default["s"] if default else None,
               prefill_ms=prefill_ms,
               compile_s=ro["compile_s"] if ro else None,
               first_generation_s=ro["first_generation_s"] if ro else None,
               default_mode_compile_s=default["compile_s"] if default else None,
               new_tokens=steps, prompt_tokens=prompt_len,
               tokens_sha=tokens_sha(shown), first_tokens=shown[:16],
               eager_tokens_sha=tokens_sha(eager_tokens),
               same_tokens=ro["tokens"] == eager_tokens if ro else None,
               agreeing_tokens=agreeing(ro["tokens"]) if ro else None,
               default_same_tokens=default["tokens"] == eager_tokens if default else None,
               forward_max_diff=forward_diff,
               note=f"batch 1, {prompt_len}-token prompt, {steps} greedy decode steps with a "
                    "key/value cache, bfloat16 weights; compiled_ms: the step under "
                    "torch.compile(mode=\"reduce-overhead\", fullgraph=True), per token; the "
                    "ids (tokens_sha, first_tokens) are the prefill's and one a step, the "
                    "reduce-overhead decode's")


# ---- nanoGPT's shakespeare_char run, for the --train-run row ----

RECIPE = dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch_size=64, dropout=0.2,
              learning_rate=1e-3, min_lr=1e-4, warmup_iters=100, beta2=0.99, grad_clip=1.0,
              weight_decay=0.1, eval_interval=250, eval_iters=200)


def cosine_lr(it, iters):
    r = RECIPE
    if it < r["warmup_iters"]:
        return r["learning_rate"] * (it + 1) / (r["warmup_iters"] + 1)
    if it > iters:
        return r["min_lr"]
    ratio = (it - r["warmup_iters"]) / max(1, iters - r["warmup_iters"])
    return r["min_lr"] + 0.5 * (1 + math.cos(math.pi * ratio)) * (r["learning_rate"] - r["min_lr"])


def torch_train_run(text_path, iters):
    r = RECIPE
    text = open(text_path, encoding="utf-8").read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(data))
    splits = {"train": data[:n], "val": data[n:]}
    torch.manual_seed(1337)
    model = GPT(len(chars), r["block_size"], r["n_layer"], r["n_head"], r["n_embd"],
                r["dropout"]).to(DEV)
    # nanoGPT's initialization: normal(0, 0.02) weights, zero biases, the residual projections
    # scaled by 1/sqrt(2 * n_layer).
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            torch.nn.init.zeros_(p)
        elif p.dim() >= 2:
            residual = name.endswith(("c_proj.weight", "proj.weight"))
            std = 0.02 / math.sqrt(2 * r["n_layer"]) if residual else 0.02
            torch.nn.init.normal_(p, mean=0.0, std=std)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": r["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=r["learning_rate"], betas=(0.9, r["beta2"]), foreach=True)
    params = list(model.parameters())

    def batch(split):
        d = splits[split]
        ix = torch.randint(len(d) - r["block_size"], (r["batch_size"],))
        x = torch.stack([d[i:i + r["block_size"]] for i in ix])
        y = torch.stack([d[i + 1:i + 1 + r["block_size"]] for i in ix])
        return (x.pin_memory().to(DEV, non_blocking=True),
                y.pin_memory().to(DEV, non_blocking=True))

    @torch.no_grad()
    def evaluate():
        model.eval()
        out = {}
        for split in ("train", "val"):
            losses = torch.zeros(r["eval_iters"])
            for k in range(r["eval_iters"]):
                x, y = batch(split)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    losses[k] = model(x, y).item()
            out[split] = losses.mean().item()
        model.train()
        return out

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    best = float("inf")
    x, y = batch("train")
    train_s = 0.0
    for it in range(iters + 1):
        if it % r["eval_interval"] == 0 or it == iters:
            best = min(best, evaluate()["val"])
        if it == iters:
            break
        for g in opt.param_groups:
            g["lr"] = cosine_lr(it, iters)
        t1 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        x, y = batch("train")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, r["grad_clip"])
        opt.step()
        if it % 10 == 0:
            loss.item()  # nanoGPT's log line reads the loss every log_interval iterations
        train_s += time.perf_counter() - t1
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    return {"name": "cuda/train_run", "device": DEV, "framework": "torch", "iters": iters,
            "wall_s": wall, "ms_per_iter": 1000 * train_s / iters, "best_val_loss": best}


def ember_train_run(gpt, text_path, iters, compiled):
    r = RECIPE
    cmd = [gpt, "train", "--device", "cuda", "--data", text_path, "--quiet",
           "--out_dir", "/tmp/ember-train-run", "--max_iters", str(iters),
           "--lr_decay_iters", str(iters), "--compile", "true" if compiled else "false"]
    for k in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "dropout",
              "learning_rate", "min_lr", "warmup_iters", "beta2", "grad_clip", "weight_decay",
              "eval_interval", "eval_iters"):
        cmd += [f"--{'lr' if k == 'learning_rate' else k}", str(r[k])]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        sys.stderr.write(res.stdout + res.stderr)
        raise SystemExit(f"compare_torch: {' '.join(cmd)} failed with status {res.returncode}")
    m = re.search(r"\(([0-9.]+) ms/iter training\); best val loss ([0-9.]+)", res.stdout)
    return {"name": "cuda/train_run", "device": DEV, "framework": "ember", "iters": iters,
            "compiled": compiled, "wall_s": wall, "ms_per_iter": float(m.group(1)) if m else None,
            "best_val_loss": float(m.group(2)) if m else None, "summary": res.stdout.strip()[-300:]}


def torch_rows(quick, repeat, wants, use_compile):
    """PyTorch's side of each wanted row, yielded as it is measured."""
    if wants("cuda/add_f32_256M"):
        n = (1 << 24) if quick else (256 << 20)
        a, b = torch.rand(n, device=DEV), torch.rand(n, device=DEV)
        yield bandwidth_row("cuda/add_f32_256M", gpu_ms(lambda: a + b, repeat), 3.0 * n * 4,
                            repeat)
        del a, b
    rows_n, cols = (1024 if quick else 16384), 4096
    if wants("cuda/softmax_f32_16384x4096"):
        x = torch.randn(rows_n, cols, device=DEV)
        yield bandwidth_row("cuda/softmax_f32_16384x4096",
                            gpu_ms(lambda: x.softmax(-1), repeat), 2.0 * rows_n * cols * 4,
                            repeat)
    if wants("cuda/layer_norm_f32_16384x4096"):
        x = torch.randn(rows_n, cols, device=DEV)
        w, b = torch.ones(cols, device=DEV), torch.zeros(cols, device=DEV)
        yield bandwidth_row("cuda/layer_norm_f32_16384x4096",
                            gpu_ms(lambda: F.layer_norm(x, (cols,), w, b), repeat),
                            2.0 * rows_n * cols * 4, repeat)
    if wants("cuda/matmul_bf16_8192"):
        m = 1024 if quick else 8192
        a = torch.randn(m, m, device=DEV, dtype=torch.bfloat16)
        b = torch.randn(m, m, device=DEV, dtype=torch.bfloat16)
        ms = gpu_ms(lambda: a @ b, repeat)
        yield row("cuda/matmul_bf16_8192", ms, tflops=2.0 * m ** 3 / (ms * 1e9))
    if wants("cuda/add_1elem_overhead"):
        # Host side, as ember-bench: batches of 256 queued ops, the device drained between them.
        a, b = torch.ones(1, device=DEV), torch.ones(1, device=DEV)
        per_op = []
        for _ in range(20 if quick else 400):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(256):
                a + b
            per_op.append((time.perf_counter() - t0) * 1000 / 256)
        torch.cuda.synchronize()
        per_op.sort()
        ms = per_op[len(per_op) // 2]
        yield row("cuda/add_1elem_overhead", ms, us_per_op=ms * 1000)
    for name, bsz, heads, t, p in (("cuda/attention_bf16", 8 if quick else 64, 6, 256, 0.2),
                                   ("cuda/attention_gpt2_bf16", 2 if quick else 16, 12, 1024, 0.0)):
        if not wants(name):
            continue
        hs = 64
        q, k, v = (torch.randn(bsz, heads, t, hs, device=DEV, dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))
        g = torch.randn(bsz, heads, t, hs, device=DEV, dtype=torch.bfloat16)
        with torch.no_grad():
            fwd = gpu_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                dropout_p=p), repeat)
        ms = gpu_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                           dropout_p=p).backward(g), repeat)
        flops = 3.5 * 2 * 2.0 * bsz * heads * t * t * hs / 2
        yield row(name, ms, fwd_ms=fwd, tflops=flops / (ms * 1e9),
                  note=f"fwd + bwd, causal, dropout {p}")
    for name, dtype in (("cuda/gpt_train_step", torch.float32),
                        ("cuda/gpt_train_step_bf16", torch.bfloat16)):
        if wants(name):
            yield gpt_step_row(name, quick, 2 if quick else 10, dtype)

    # Compiled against eager.
    if wants("cuda/fused_relu_add_mul_f32_256M"):
        n = (1 << 24) if quick else (256 << 20)
        a, b, c = (torch.randn(n, device=DEV) for _ in range(3))
        yield compiled_bandwidth_row("cuda/fused_relu_add_mul_f32_256M",
                                     lambda p, q, r: (torch.relu(p) + q) * r, (a, b, c),
                                     4.0 * n * 4, repeat, use_compile)
        del a, b, c
    if wants("cuda/compiled_softmax_f32_16384x4096"):
        x = torch.randn(rows_n, cols, device=DEV)
        yield compiled_bandwidth_row("cuda/compiled_softmax_f32_16384x4096",
                                     lambda t: t.softmax(-1), (x,), 2.0 * rows_n * cols * 4,
                                     repeat, use_compile)
    if wants("cuda/compiled_layer_norm_f32_16384x4096"):
        x = torch.randn(rows_n, cols, device=DEV)
        w, b = torch.randn(cols, device=DEV), torch.randn(cols, device=DEV)
        yield compiled_bandwidth_row("cuda/compiled_layer_norm_f32_16384x4096",
                                     lambda t, wt, bs: F.layer_norm(t, (cols,), wt, bs),
                                     (x, w, b), 2.0 * rows_n * cols * 4, repeat, use_compile)
    for shape in GPT_SHAPES:
        name = f"cuda/gpt_forward{shape}_bf16"
        if wants(name):
            yield gpt_forward_row(name, shape, quick, repeat, use_compile)
    for shape in GPT_SHAPES:
        name = f"cuda/gpt_train_step{shape}_bf16" if shape else "cuda/gpt_train_step_compiled_bf16"
        if wants(name):
            yield gpt_compiled_step_row(name, shape, quick, 2 if quick else 10, use_compile)

    # GPT-2 at batch 1: one forward, and greedy decoding with a key/value cache.
    if wants("cuda/gpt_forward_gpt2_b1_bf16"):
        yield gpt_forward_b1_row("cuda/gpt_forward_gpt2_b1_bf16", repeat, use_compile)
    if wants("cuda/gpt_decode_gpt2_bf16"):
        yield gpt_decode_row("cuda/gpt_decode_gpt2_bf16", quick, use_compile)


def ember_rows(path, quick, repeat, only, env=None):
    cmd = [path, "--filter", only or "cuda/", "--repeat", str(repeat)]
    if quick:
        cmd.append("--quick")
    res = subprocess.run(cmd, capture_output=True, text=True,
                         env=dict(os.environ, **env) if env else None)
    if res.returncode != 0:
        sys.stderr.write(res.stderr)
        raise SystemExit(f"compare_torch: {' '.join(cmd)} failed with status {res.returncode}")
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    for r in rows:
        r["framework"] = "ember"
    return rows


def ratios(ember, torch_):
    by_name = {r["name"]: r for r in torch_}
    out = []
    for e in ember:
        t = by_name.get(e["name"])
        if not t or not e.get("eager_ms") or not t.get("eager_ms"):
            continue
        r = {"name": e["name"], "device": DEV, "framework": "ratio",
             "ember_ms": e["eager_ms"], "torch_ms": t["eager_ms"],
             "ember_over_torch": e["eager_ms"] / t["eager_ms"]}
        if e.get("variant"):
            r["variant"] = e["variant"]
        if e.get("compiled_ms") and t.get("compiled_ms"):
            r.update(ember_compiled_ms=e["compiled_ms"], torch_compiled_ms=t["compiled_ms"],
                     compiled_ember_over_torch=e["compiled_ms"] / t["compiled_ms"])
        if e.get("reduce_overhead_ms") and t.get("reduce_overhead_ms"):
            r.update(ember_reduce_overhead_ms=e["reduce_overhead_ms"],
                     torch_reduce_overhead_ms=t["reduce_overhead_ms"],
                     reduce_overhead_ember_over_torch=e["reduce_overhead_ms"]
                     / t["reduce_overhead_ms"])
        if "decode" in e["name"] and e.get("tokens_per_s") and t.get("tokens_per_s"):
            # Higher is better for ember here: its tokens/s over torch's.
            r.update(ember_tokens_per_s=e["tokens_per_s"], torch_tokens_per_s=t["tokens_per_s"],
                     decode_speedup=e["tokens_per_s"] / t["tokens_per_s"])
        e = dict(e, compile_s=e.get("compile_s", e.get("cold_compile_s")))  # gpt_forward rows
        for k in ("fraction_of_copy", "eager_fraction_of_copy", "peak_mb", "eager_peak_mb",
                  "compiled_peak_mb", "us_per_op", "compile_s", "host_ms", "compiled_host_ms",
                  "reduce_overhead_compile_s", "eager_tokens_per_s", "default_mode_tokens_per_s",
                  "prefill_ms", "first_generation_s", "same_tokens"):
            if e.get(k) is not None and t.get(k) is not None:
                r[f"ember_{k}"], r[f"torch_{k}"] = e[k], t[k]
        if e.get("warm_start_s") is not None:  # ember's own: torch.compile's has no such row
            r["ember_warm_start_s"] = e["warm_start_s"]
        out.append(r)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ember", default="build-gpu/bench/ember-bench")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--only", default="", help="regex selecting rows (default: every cuda/ row)")
    ap.add_argument("--torch-compile", action=argparse.BooleanOptionalAction, default=True,
                    help="time torch.compile on the compiled rows (--no-torch-compile: eager only)")
    ap.add_argument("--train-run", type=int, default=0, metavar="ITERS",
                    help="compare a training run of ITERS iterations instead of the rows")
    ap.add_argument("--ember-compile", action=argparse.BooleanOptionalAction, default=True,
                    help="--train-run: ember trains with --compile true (--no-ember-compile: eager)")
    ap.add_argument("--profile", action="store_true",
                    help="print torch.profiler's kernel table of each compiled GPT step (stderr)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:VAR=VALUE[,VAR=VALUE]",
                    help="ember's rows again with these environment variables set (repeatable)")
    ap.add_argument("--gpt", default="build-gpu/apps/ember-gpt")
    ap.add_argument("--data", default="data/tinyshakespeare.txt")
    a = ap.parse_args()
    global PROFILE
    PROFILE = a.profile
    if not torch.cuda.is_available():
        raise SystemExit("compare_torch: PyTorch sees no CUDA device")
    if a.train_run:
        e = ember_train_run(a.gpt, a.data, a.train_run, a.ember_compile)
        print(json.dumps(e), flush=True)
        t = torch_train_run(a.data, a.train_run)
        print(json.dumps(t), flush=True)
        print(json.dumps({"name": "cuda/train_run", "framework": "ratio",
                          "ember_over_torch_wall": e["wall_s"] / t["wall_s"]}), flush=True)
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    wants = lambda name: re.search(a.only, name) is not None if a.only else True
    t0 = time.perf_counter()
    ember = ember_rows(a.ember, a.quick, a.repeat, a.only)
    for v in a.variant:
        name, _, assigns = v.partition(":")
        env = dict(kv.split("=", 1) for kv in assigns.split(",") if "=" in kv)
        if not name or not env:
            raise SystemExit(f"compare_torch: --variant {v!r}: want NAME:VAR=VALUE[,VAR=VALUE]")
        try:
            rows = ember_rows(a.ember, a.quick, a.repeat, a.only, env)
        except SystemExit as e:  # one variant that fails loses its own rows, not the others'
            print(f"[compare_torch] variant {name}: {e}", file=sys.stderr, flush=True)
            continue
        ember += [dict(r, variant=name, variant_env=env) for r in rows]
    print(f"[compare_torch] {len(ember)} ember rows measured in {time.perf_counter() - t0:.0f} s",
          file=sys.stderr, flush=True)
    torch.cuda.empty_cache()
    if a.torch_compile:
        # torch.compile's disk caches in a new directory, so its first calls compile cold.
        cache = tempfile.TemporaryDirectory(prefix="torch-compile-cache-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache.name
        os.environ["TRITON_CACHE_DIR"] = os.path.join(cache.name, "triton")
    meta = {"name": "meta", "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "cuda": torch.version.cuda, "torch_compile": a.torch_compile,
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    # Each row is printed as soon as it is measured, so a run cut short keeps what it measured.
    for r in [meta] + ember:
        print(json.dumps(r), flush=True)
    theirs = []
    t0 = time.perf_counter()
    for r in torch_rows(a.quick, a.repeat, wants, a.torch_compile):
        r = dict(r)
        theirs.append(r)
        print(json.dumps(r), flush=True)
        print(f"[compare_torch] {r['name']}: torch measured at {time.perf_counter() - t0:.0f} s",
              file=sys.stderr, flush=True)
    for r in ratios(ember, theirs):
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
