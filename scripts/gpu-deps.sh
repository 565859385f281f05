#!/usr/bin/env bash
# Downloads, on a machine with Debian's package registry, the Debian 12 packages ember builds
# against (OpenBLAS, GoogleTest, CLI11, nlohmann-json) and cuDNN's frontend wheel into
# .gpu-deps/, and Open MPI's packages with the libraries they load into .gpu-deps/mpi/, for a
# GPU machine that has no registry: scripts/gpu-build.sh unpacks them there into a private
# prefix (Open MPI for scripts/test-multi-gpu.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu-deps
cd .gpu-deps
apt-get download libopenblas0-openmp libopenblas-openmp-dev libgfortran5 libgtest-dev \
  libcli11-dev nlohmann-json3-dev
# cuDNN's frontend headers (attention on cuDNN), as a wheel from PyPI: test-gpu.sh unpacks its
# include/ when the GPU machine's Python has none.
python3 -m pip download -q --no-deps --only-binary=:all: nvidia-cudnn-frontend -d .
# Open MPI 4.1 and what it loads beyond a base system (fabrics, hwloc, PMIx, libevent ...).
mkdir -p mpi
(cd mpi && apt-get download openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev \
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libhwloc15 libhwloc-plugins \
  libibverbs1 ibverbs-providers libnl-3-200 libnl-route-3-200 libnuma1 libpmix2 \
  libpsm-infinipath1 libpsm2-2 librdmacm1 libucx0 libmunge2 libpciaccess0 libxnvctrl0)
ls -l . mpi
