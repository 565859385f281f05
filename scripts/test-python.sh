#!/usr/bin/env bash
# Installs the Python package from this tree (`pip install .`) and runs its pytest suite
# (python/tests). Usage: scripts/test-python.sh [build-dir]. With a build dir that
# scripts/build.sh configured with -DEMBER_PYTHON=ON (scripts/test.sh does), pip reuses it and
# builds only what changed, instead of compiling libember a second time.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
PYTHON=${PYTHON:-python3}
start=$SECONDS
# The build backend's own options: keep the C++ tests and ember-bench configured in a build dir
# shared with scripts/build.sh (pyproject.toml turns them off for a plain `pip install .`).
args=(--no-build-isolation -C "build-dir=$BUILD_DIR" -C cmake.define.EMBER_BUILD_TESTS=ON
      -C cmake.define.EMBER_BUILD_BENCH=ON .)
# Debian's Python refuses pip installs outside a virtual environment (PEP 668) unless told.
if "$PYTHON" -c "import sys, sysconfig, os; sys.exit(not os.path.exists(
    os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))"; then
  args=(--break-system-packages "${args[@]}")
fi
echo "[test-python] pip install . (build dir $BUILD_DIR)"
"$PYTHON" -m pip install -q "${args[@]}"
echo "[test-python] pytest python/tests"
# From the repository root, python/ is not on sys.path: the tests import the installed package.
"$PYTHON" -m pytest -q python/tests
echo "[test-python] took $((SECONDS - start)) s"
