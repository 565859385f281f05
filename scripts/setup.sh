#!/usr/bin/env bash
# Installs what ember needs and is missing (Debian 12, as root): compilers, CMake, Ninja,
# OpenBLAS (OpenMP build), GoogleTest, CLI11, nlohmann-json, and Python's safetensors
# (used by the interoperability tests).
set -euo pipefail

APT_PACKAGES=(g++ cmake ninja-build pkg-config libopenblas-openmp-dev libgtest-dev
              libcli11-dev nlohmann-json3-dev python3 python3-pip ccache)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing: ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! python3 -c "import safetensors, numpy" >/dev/null 2>&1; then
  echo "[setup] installing python packages: safetensors numpy"
  python3 -m pip install -q safetensors numpy 2>/dev/null ||
    python3 -m pip install -q --break-system-packages safetensors numpy
fi
