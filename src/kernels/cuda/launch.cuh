// Kernel launches that may use programmatic dependent launch (on unless EMBER_PDL=0 in the
// environment): a launch through launch_after may start before the kernel before it in the
// stream has ended, and its kernel waits (wait_for_prior_grids, attention_tiles.cuh) before it
// reads what earlier kernels wrote; its blocks' setup and their prefetches and loads of what no
// kernel writes (weights) overlap the earlier kernel's tail. Only kernels that wait so may be
// launched this way (gemv.cuh, cached_attention.cuh, reduce.cu's arg_split_kernel).
#pragma once
#include <cuda_runtime.h>

#include "kernels/cuda/runtime.h"

namespace ember::cuda::detail {

// Whether programmatic launch is on: unless EMBER_PDL=0 (read once).
bool programmatic_launch();

template <class... Params, class... Args>
void launch_after(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                  cudaStream_t stream, const char* what, Args... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = programmatic_launch() ? 1 : 0;
  check(cudaLaunchKernelEx(&config, kernel, Params(args)...), what);
}

}  // namespace ember::cuda::detail
