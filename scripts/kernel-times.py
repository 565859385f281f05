#!/usr/bin/env python3
"""Each kernel's GPU time in an ember-bench row, by Nsight Compute, as a table by kernel.

Usage: scripts/kernel-times.py ROW [--skip N] [--count M] [--bench PATH] [--csv OUT.csv]
       scripts/kernel-times.py --from OUT.csv

Runs `ncu --cache-control none --launch-skip N --launch-count M --metrics
gpu__time_duration.sum --csv` over `ember-bench --filter ROW --quick` with
EMBER_BENCH_COMPILED_ONLY=1 (the default compiled mode alone: its kernels are the ones a
reduce-overhead replay runs, launched one by one), then sums the M kernels it timed by name and
grid. ncu runs each kernel alone, so programmatic dependent launch overlaps nothing: the times
add up to more than a replay takes, and show where a step's time goes, not what it costs end to
end. Caches are left warm (--cache-control none), as in a decode loop. Pick --skip past the
prompt and the first steps (1500 for cuda/gpt_decode_gpt2_bf16, whose compiled-only run is the
prompt and then the decode steps), and --count to cover whole steps (about 70 kernels a decode
token). cuda/gpt_train_step_b8_bf16's compiled-only run is two warm steps and then the timed
ones: skip the first two steps' kernels. With --from, the table of a CSV written before.
"""
import argparse
import collections
import csv
import os
import subprocess
import sys


def table(lines):
    """(name and grid, [microseconds]) for the metric rows of ncu's CSV lines, largest total first."""
    rows = csv.DictReader([l for l in lines if l.startswith('"')])
    times = collections.defaultdict(list)
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(
            r["Metric Unit"], 1e-3)
        key = f'{r["Kernel Name"][:80]} grid {r["Grid Size"]}'
        times[key].append(float(r["Metric Value"].replace(",", "")) * unit)
    return sorted(times.items(), key=lambda kv: -sum(kv[1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("row", nargs="?", default="")
    ap.add_argument("--skip", type=int, default=1500)
    ap.add_argument("--count", type=int, default=140)
    ap.add_argument("--bench", default="build-gpu/bench/ember-bench")
    ap.add_argument("--csv", default="")
    ap.add_argument("--from", dest="from_csv", default="")
    a = ap.parse_args()
    if a.from_csv:
        lines = open(a.from_csv).read().splitlines()
    else:
        if not a.row:
            ap.error("give a row (an ember-bench filter) or --from CSV")
        cmd = ["ncu", "--cache-control", "none", "--launch-skip", str(a.skip), "--launch-count",
               str(a.count), "--metrics", "gpu__time_duration.sum", "--csv", a.bench, "--filter",
               a.row, "--quick"]
        env = dict(os.environ, EMBER_BENCH_COMPILED_ONLY="1")
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if a.csv:
            with open(a.csv, "w") as f:
                f.write(done.stdout)
        lines = done.stdout.splitlines()
        if done.returncode != 0:
            sys.stderr.write(done.stderr[-4000:])
            sys.exit(f"kernel-times: ncu exited with {done.returncode}")
    rows = table(lines)
    if not rows:
        sys.exit("kernel-times: ncu timed no kernel (is --skip past the row's last launch?)")
    total = sum(sum(v) for _, v in rows)
    print(f"{'kernel':96} {'calls':>5} {'us/call':>8} {'total us':>9} {'share':>6}")
    for name, v in rows:
        print(f"{name:96} {len(v):5d} {sum(v) / len(v):8.2f} {sum(v):9.1f} {sum(v) / total:6.1%}")
    print(f"{'all':96} {sum(len(v) for _, v in rows):5d} {'':8} {total:9.1f}")


if __name__ == "__main__":
    main()
