#!/usr/bin/env bash
# Builds ember with its CUDA backend and runs every test, the GPU tests included, on a machine
# with an NVIDIA GPU. Usage: scripts/test-gpu.sh [gtest filter]. With OUT set, the report goes
# to $OUT/gpu-tests.json; with EMBER_MEMCHECK=1 the CUDA tests run again under memcheck;
# TARGETS=ember-tests builds the test binary alone (a shorter build on a fresh machine). No GPU
# (or no CUDA toolkit) is a failure here, never a pass. A test that crashes is named on stderr with
# a backtrace (tests/support/main.cpp), also under --gtest_brief.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-build.sh
echo "[test-gpu] running the test suite${1:+ ($1)}, a process a suite, the GPU's first"
# One process a suite (scripts/run-suites.py): each reports as it ends, and a crash or a hang
# names its suite without losing the others' results. EMBER_SUITE_TIMEOUT: seconds a suite.
export EMBER_CACHE_DIR=${EMBER_CACHE_DIR:-$PWD/build-gpu/kernel-cache}  # NVRTC's builds, shared
python3 scripts/run-suites.py ./build-gpu/tests/ember-tests ${1:+--filter "$1"} \
  --first '^(Cuda|GptKvCache|CompileMode|RenderCuda|[A-Za-z]*Emulation)' \
  --timeout "${EMBER_SUITE_TIMEOUT:-900}" ${OUT:+--json "$OUT/gpu-tests.json"}
# EMBER_MEMCHECK=1: the CUDA tests again under compute-sanitizer's memcheck (every kernel's
# reads and writes checked; the out-of-memory test left out, as the sanitizer's own memory
# changes what runs out).
if [[ "${EMBER_MEMCHECK:-0}" == 1 ]]; then
  echo "[test-gpu] compute-sanitizer --tool memcheck over the CUDA tests"
  compute-sanitizer --tool memcheck --error-exitcode 1 ./build-gpu/tests/ember-tests --gtest_brief=1 \
    --gtest_filter='Cuda*:-CudaRuntime.OutOfMemory*'
fi
