#!/usr/bin/env bash
# Installs what is missing, builds, runs every test, then installs ember into a temporary prefix
# and builds and runs examples/ against it (scripts/test-install.sh). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
echo "[test] running the test suite"
./build/tests/ember-tests --gtest_brief=1
echo "[test] installing into a temporary prefix and building examples/ against it"
scripts/test-install.sh
