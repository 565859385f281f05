#!/usr/bin/env bash
# Runs ember-dist-tests (the tests of ember::distributed that need several processes) on 2 ranks
# under mpirun, within a time limit. Usage: scripts/test-distributed.sh [build-dir] [gtest args...]
# Skips with a note when the build has no MPI (no ember-dist-tests).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
shift || true
BIN="$BUILD_DIR/tests/ember-dist-tests"
if [[ ! -x "$BIN" ]]; then
  echo "[test-distributed] $BIN not built (ember was configured without MPI): skipped"
  exit 0
fi
# Open MPI refuses to run as root unless told; --oversubscribe lets 2 ranks share fewer cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "[test-distributed] mpirun -np 2 $BIN"
timeout 600 mpirun --oversubscribe -np 2 "$BIN" --gtest_brief=1 "$@"
