#!/usr/bin/env python3
"""Python-side overhead of ember, per call, beside PyTorch's when torch is importable.

Prints one JSON object: `a + b` on 1-element float32 tensors (the per-op cost of the bindings,
dispatch and allocation); for two compiled functions, `add(a, b)` and `affine(x)` (`x * SCALE +
1`: Python numbers in the graph and a global read, whose value is guarded), the guard check
from Python (`would_hit`: flattening the arguments and the guarded globals, the C++ guard check
and cache lookup) and a whole compiled call (guard check and replay), for the `eager` and
`compiler` backends. Each figure is the best of `--repeat` rounds of `--number` calls, in
microseconds.

usage: bench/python_overhead.py [--number N] [--repeat R]
"""
import argparse
import json
import os
import platform
import subprocess
import timeit

import ember


def per_call_us(stmt, number, repeat):
    """Best microseconds per call of `stmt` (a no-argument callable) over `repeat` rounds."""
    stmt()  # first call outside the timing: traces and builds what compiled functions need
    return min(timeit.repeat(stmt, number=number, repeat=repeat)) / number * 1e6


SCALE = 2.0


def add(a, b):
    return a + b


def affine(x):
    return x * SCALE + 1


def cpu_model():
    """The CPU's model name (Linux), else what the platform module knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit():
    """The ember checkout's commit, when this script runs from one."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=os.path.dirname(os.path.abspath(__file__)),
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=20000, help="calls per round")
    ap.add_argument("--repeat", type=int, default=7, help="rounds; the best one is reported")
    args = ap.parse_args()
    n, r = args.number, args.repeat

    a, b = ember.ones(1), ember.ones(1)
    out = {"name": "python/overhead", "machine": cpu_model(),
           "cpus": os.cpu_count(), "python": platform.python_version(), "commit": commit()}
    out["ember_add_1elem_us"] = per_call_us(lambda: a + b, n, r)
    for fn, fargs in ((add, (a, b)), (affine, (a,))):
        for backend in ("eager", "compiler"):
            f = ember.compile(fn, backend=backend)
            f(*fargs)
            assert f.would_hit(*fargs), "the guard check missed: the figures would be wrong"
            key = f"{fn.__name__}_{backend}"
            out[f"would_hit_{key}_us"] = per_call_us(lambda: f.would_hit(*fargs), n, r)
            out[f"compiled_call_{key}_us"] = per_call_us(lambda: f(*fargs), n, r)
            assert f.stats()["traces"] == 1, "a call traced again: the figures would be wrong"
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        ta, tb = torch.ones(1), torch.ones(1)
        out["torch_version"] = torch.__version__
        out["torch_add_1elem_us"] = per_call_us(lambda: ta + tb, n, r)
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}))


if __name__ == "__main__":
    main()
