#!/usr/bin/env bash
# Builds ember with its CUDA backend and runs every test, the GPU tests included, on a machine
# with an NVIDIA GPU. Usage: scripts/test-gpu.sh [gtest filter]. With OUT set, the report goes
# to $OUT/gpu-tests.json; with EMBER_MEMCHECK=1 the CUDA tests run again under memcheck;
# TARGETS=ember-tests builds the test binary alone (a shorter build on a fresh machine). No GPU
# (or no CUDA toolkit) is a failure here, never a pass.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "[test-gpu] no NVIDIA GPU or driver on this machine: the GPU tests cannot run" >&2
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
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_REQUIRE_CUDA=ON \
  "${nccl_args[@]}" "${cudnn_args[@]}" >/dev/null
# By default the library, the tests, ember-bench (bench/compare_torch.py runs it) and ember-gpt.
ninja -C build-gpu ${TARGETS:-}
echo "[test-gpu] running the test suite${1:+ ($1)}"
./build-gpu/tests/ember-tests --gtest_brief=1 ${1:+--gtest_filter=$1} \
  ${OUT:+--gtest_output=json:$OUT/gpu-tests.json}
# EMBER_MEMCHECK=1: the CUDA tests again under compute-sanitizer's memcheck (every kernel's
# reads and writes checked; the out-of-memory test left out, as the sanitizer's own memory
# changes what runs out).
if [[ "${EMBER_MEMCHECK:-0}" == 1 ]]; then
  echo "[test-gpu] compute-sanitizer --tool memcheck over the CUDA tests"
  compute-sanitizer --tool memcheck --error-exitcode 1 ./build-gpu/tests/ember-tests --gtest_brief=1 \
    --gtest_filter='Cuda*:-CudaRuntime.OutOfMemory*'
fi
