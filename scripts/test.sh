#!/usr/bin/env bash
# Installs what is missing, checks that every public function is documented (in its header and
# in docs/api.md: scripts/api_docs.py), builds (with the Python extension, so libember is
# compiled once, position-independent, for both), runs every test (those of ember::distributed
# in two processes under mpirun: scripts/test-distributed.sh), installs the Python package
# and runs its tests (scripts/test-python.sh), then installs ember from that same build into a
# temporary prefix and builds and runs examples/ against it (scripts/test-install.sh). Exits
# non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "[test] public functions documented in the headers and docs/api.md"
python3 scripts/api_docs.py
scripts/build.sh build -DEMBER_PYTHON=ON -DPython_EXECUTABLE="$(python3 -c 'import sys; print(sys.executable)')"
echo "[test] running the test suite"
./build/tests/ember-tests --gtest_brief=1
scripts/test-distributed.sh build
echo "[test] the Python package"
scripts/test-python.sh build
echo "[test] installing into a temporary prefix and building examples/ against it"
scripts/test-install.sh --reuse build
