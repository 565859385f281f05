#!/usr/bin/env python3
"""Runs a gtest binary one test suite a process (scripts/test-gpu.sh's runner).

Each suite runs in a process of its own with a time limit, and its result is printed as it
ends: a crash, a hang or a failure names its suite, and the suites before and after it still
report. Usage: scripts/run-suites.py BINARY [--filter GTEST_FILTER] [--json OUT.json]
[--timeout SECONDS] [--first SUITE_REGEX]. --first runs the suites matching the regex first (the
GPU's, so that they report before a long CPU part). The merged report (gtest's JSON layout, every
suite's entries) goes to --json. A skipped test is reported as skipped, never as passed; the exit
status is non-zero when any suite failed, crashed, ran out of time or ran no test.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time


def tests_of(binary, gtest_filter):
    """The enabled tests the filter selects, by suite, in the binary's order."""
    args = [binary, "--gtest_list_tests"] + ([f"--gtest_filter={gtest_filter}"] if gtest_filter else [])
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    suites, suite = {}, None
    for line in out.splitlines():
        name = line.split("#")[0].strip()
        if not name:
            continue
        if not line.startswith(" "):
            suite = name.rstrip(".")
        elif suite and not suite.split("/")[-1].startswith("DISABLED_") and not name.startswith("DISABLED_"):
            suites.setdefault(suite, []).append(f"{suite}.{name}")
    return suites


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary")
    ap.add_argument("--filter", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--first", default="")
    a = ap.parse_args()
    tests = tests_of(a.binary, a.filter)
    suites = list(tests)
    if a.first:
        first = re.compile(a.first)
        suites = [s for s in suites if first.search(s)] + [s for s in suites if not first.search(s)]
    merged = {"tests": 0, "failures": 0, "errors": 0, "time": "0s", "testsuites": []}
    bad, all_skipped, total_s = [], [], 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for i, suite in enumerate(suites):
            report = os.path.join(tmp, f"{i}.json")
            # Not brief: a suite that runs out of time shows the test it was in.
            args = [a.binary, "--gtest_filter=" + ":".join(tests[suite]),
                    f"--gtest_output=json:{report}"]
            t0 = time.monotonic()
            try:
                proc = subprocess.run(args, capture_output=True, text=True, timeout=a.timeout)
                rc, out = proc.returncode, proc.stdout + proc.stderr
            except subprocess.TimeoutExpired as e:
                rc = None
                out = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
            seconds = time.monotonic() - t0
            total_s += seconds
            ran = failed = skipped = 0
            if os.path.exists(report):
                with open(report) as f:
                    r = json.load(f)
                merged["testsuites"] += r.get("testsuites", [])
                ran, failed = r.get("tests", 0), r.get("failures", 0)
                skipped = sum(t.get("result") == "SKIPPED"
                              for ts in r.get("testsuites", []) for t in ts.get("testsuite", []))
                merged["skipped"] = merged.get("skipped", 0) + skipped
                merged["tests"] += ran
                merged["failures"] += failed
            if rc is None:
                state = f"ran out of its {a.timeout:.0f} s"
            elif rc < 0 or (rc != 0 and not os.path.exists(report)):
                state = f"crashed (exit status {rc})"
            elif rc != 0 or failed:
                state = f"{failed} of {ran} failed"
            elif ran == 0:
                state = "ran no test"
            elif skipped == ran:
                state = f"all {ran} skipped"
                all_skipped.append(suite)
            else:
                state = f"{ran - skipped} passed" + (f", {skipped} skipped" if skipped else "")
            print(f"[suites] {suite}: {state} ({seconds:.1f} s)", flush=True)
            if rc != 0 or failed or ran == 0:
                bad.append(suite)
                sys.stdout.write(out[-4000:])
                sys.stdout.flush()
    merged["time"] = f"{total_s:.3f}s"
    if a.json:
        with open(a.json, "w") as f:
            json.dump(merged, f, indent=1)
    print(f"[suites] {len(suites) - len(bad) - len(all_skipped)} of {len(suites)} suites passed"
          f" ({len(all_skipped)} skipped whole), {merged['tests']} tests "
          f"({merged.get('skipped', 0)} skipped) in {total_s:.0f} s" +
          (f"; skipped whole: {', '.join(all_skipped)}" if all_skipped else "") +
          (f"; not passed: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
