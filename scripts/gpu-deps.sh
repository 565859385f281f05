#!/usr/bin/env bash
# Downloads, on a machine with Debian's package registry, the Debian 12 packages ember builds
# against (OpenBLAS, GoogleTest, CLI11, nlohmann-json) and cuDNN's frontend wheel into
# .gpu-deps/, for a GPU machine that has no registry: scripts/test-gpu.sh unpacks them there
# into a private prefix.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu-deps
cd .gpu-deps
apt-get download libopenblas0-openmp libopenblas-openmp-dev libgfortran5 libgtest-dev \
  libcli11-dev nlohmann-json3-dev
# cuDNN's frontend headers (attention on cuDNN), as a wheel from PyPI: test-gpu.sh unpacks its
# include/ when the GPU machine's Python has none.
python3 -m pip download -q --no-deps --only-binary=:all: nvidia-cudnn-frontend -d .
ls -l
