#!/usr/bin/env bash
# Builds ember with its CUDA backend on a machine with an NVIDIA GPU, into build-gpu: what
# scripts/test-gpu.sh and scripts/test-multi-gpu.sh run first (they source it, so that the
# library paths it exports reach their runs). TARGETS names what to build (by default the
# library, the tests, ember-bench and ember-gpt). On a machine without a package registry the
# Debian packages and wheels scripts/gpu-deps.sh put in .gpu-deps are unpacked into a private
# prefix; with WITH_MPI=1, Open MPI too (its packages in .gpu-deps/mpi) where the machine has
# no mpirun, for several processes a GPU. No GPU (or no CUDA toolkit) is a failure here.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "[gpu-build] no NVIDIA GPU or driver on this machine: the GPU tests cannot run" >&2
  exit 2
fi
# What the build needs: the system's packages, or (on a machine without a package registry)
# the Debian packages scripts/gpu-deps.sh put in .gpu-deps, unpacked into a private prefix.
if dpkg -s libopenblas-openmp-dev libgtest-dev >/dev/null 2>&1; then
  :
elif compgen -G ".gpu-deps/*.deb" >/dev/null; then
  export EMBER_DEPS_PREFIX=/opt/ember-deps
  mkdir -p "$EMBER_DEPS_PREFIX"
  for f in .gpu-deps/*.deb; do dpkg -x "$f" "$EMBER_DEPS_PREFIX"; done
  export CMAKE_PREFIX_PATH="$EMBER_DEPS_PREFIX/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  lib="$EMBER_DEPS_PREFIX/usr/lib/x86_64-linux-gnu"
  export LD_LIBRARY_PATH="$lib:$lib/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  scripts/setup.sh
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
# NCCL (ember::distributed's CUDA backend): the toolkit's, else the nvidia-nccl wheel's header
# and library where pip installed one (PyTorch's machines have it).
nccl_args=()
if nccl_dir=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null); then
  if [[ ! -e /usr/local/cuda/include/nccl.h && ! -e /usr/include/nccl.h && -e "$nccl_dir/include/nccl.h" ]]; then
    nccl_args=(-DNCCL_INCLUDE_DIR="$nccl_dir/include")
  fi
  if ! ldconfig -p | grep -q 'libnccl\.so\.2 ' && [[ -e "$nccl_dir/lib/libnccl.so.2" ]]; then
    export EMBER_NCCL="$nccl_dir/lib/libnccl.so.2"
  fi
fi
# cuDNN (attention's fused kernels): the toolkit's, else the nvidia-cudnn wheel's header and
# library; its frontend's headers from pip's nvidia-cudnn-frontend, else the wheel that
# scripts/gpu-deps.sh put in .gpu-deps.
cudnn_args=()
if cudnn_dir=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null); then
  if [[ ! -e /usr/local/cuda/include/cudnn.h && ! -e /usr/include/cudnn.h && -e "$cudnn_dir/include/cudnn.h" ]]; then
    cudnn_args+=(-DCUDNN_INCLUDE_DIR="$cudnn_dir/include")
  fi
  if ! ldconfig -p | grep -q 'libcudnn\.so\.9 ' && [[ -e "$cudnn_dir/lib/libcudnn.so.9" ]]; then
    export EMBER_CUDNN="$cudnn_dir/lib/libcudnn.so.9"
    # libcudnn opens its engine libraries by name: the same directory on the search path.
    export LD_LIBRARY_PATH="$cudnn_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
fi
if ! python3 -c 'import cudnn' >/dev/null 2>&1 && compgen -G ".gpu-deps/nvidia_cudnn_frontend-*.whl" >/dev/null; then
  fe_dir=${EMBER_DEPS_PREFIX:-/opt/ember-deps}/cudnn_frontend
  mkdir -p "$fe_dir"
  python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])' \
    "$(compgen -G ".gpu-deps/nvidia_cudnn_frontend-*.whl" | head -1)" "$fe_dir"
  cudnn_args+=(-DCUDNN_FRONTEND_INCLUDE_DIR="$fe_dir/include")
fi
# Open MPI (ember::distributed across processes), when asked for: the system's, else the
# Debian packages in .gpu-deps/mpi, relocated to a private prefix through OPAL_PREFIX.
mpi_args=()
if [[ "${WITH_MPI:-0}" == 1 ]] && ! command -v mpirun >/dev/null 2>&1; then
  if ! compgen -G ".gpu-deps/mpi/*.deb" >/dev/null; then
    echo "[gpu-build] WITH_MPI=1 but no mpirun here and no .gpu-deps/mpi (run scripts/gpu-deps.sh)" >&2
    exit 2
  fi
  mpi_prefix=/opt/ember-mpi
  mkdir -p "$mpi_prefix"
  for f in .gpu-deps/mpi/*.deb; do dpkg -x "$f" "$mpi_prefix"; done
  export OPAL_PREFIX="$mpi_prefix/usr"
  export PATH="$mpi_prefix/usr/bin:$PATH"
  mlib="$mpi_prefix/usr/lib/x86_64-linux-gnu"
  export LD_LIBRARY_PATH="$mlib:$mlib/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # One host: mpirun starts the ranks itself, but wants a remote shell named all the same.
  export OMPI_MCA_plm_rsh_agent=/bin/false
  ln -sf mpirun.openmpi "$mpi_prefix/usr/bin/mpirun"
  mpi_args=(-DMPI_CXX_COMPILER="$mpi_prefix/usr/bin/mpicxx.openmpi"
            -DMPIEXEC_EXECUTABLE="$mpi_prefix/usr/bin/mpirun.openmpi")
fi
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_REQUIRE_CUDA=ON \
  "${nccl_args[@]}" "${cudnn_args[@]}" "${mpi_args[@]}" >/dev/null
# By default the library, the tests, ember-bench (bench/compare_torch.py runs it) and ember-gpt.
ninja -C build-gpu ${TARGETS:-}
