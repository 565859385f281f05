#!/usr/bin/env python3
"""Turns ember-bench JSON lines (stdin) into a markdown table for docs/bench.md."""
import json
import sys


def fmt(v):
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


rows = [json.loads(line) for line in sys.stdin if line.strip().startswith("{")]
extra = []
for r in rows:
    for k in r:
        if k not in ("name", "device", "eager_ms", "compiled_ms", "speedup", "note") and k not in extra:
            extra.append(k)
cols = ["name", "device", "eager_ms", "compiled_ms", "speedup"] + extra
print("| " + " | ".join(cols) + " |")
print("|" + "---|" * len(cols))
for r in rows:
    print("| " + " | ".join(fmt(r.get(c)) for c in cols) + " |")
