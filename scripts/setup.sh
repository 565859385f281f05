#!/usr/bin/env bash
# Installs what ember needs and is missing (Debian 12, as root): compilers, CMake, Ninja,
# OpenBLAS (OpenMP build), GoogleTest, CLI11, nlohmann-json, Open MPI (ember::distributed and its
# tests under mpirun), Python's headers, and Python's
# safetensors and numpy (used by the interoperability tests), nanobind, scikit-build-core and
# pytest (the Python package and its tests).
set -euo pipefail

APT_PACKAGES=(g++ cmake ninja-build pkg-config libopenblas-openmp-dev libgtest-dev
              libcli11-dev nlohmann-json3-dev openmpi-bin libopenmpi-dev python3 python3-dev
              python3-pip ccache)

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

PY_PACKAGES=(safetensors numpy nanobind scikit-build-core pytest)
PY_MODULES=(safetensors numpy nanobind scikit_build_core pytest)
# With a CUDA toolkit: cuDNN's frontend headers (attention on cuDNN's fused kernels).
if command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  PY_PACKAGES+=(nvidia-cudnn-frontend)
  PY_MODULES+=(cudnn)
fi
py_missing=()
for i in "${!PY_MODULES[@]}"; do
  python3 -c "import ${PY_MODULES[$i]}" >/dev/null 2>&1 || py_missing+=("${PY_PACKAGES[$i]}")
done
if ((${#py_missing[@]})); then
  echo "[setup] installing python packages: ${py_missing[*]}"
  python3 -m pip install -q "${py_missing[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${py_missing[@]}"
fi
