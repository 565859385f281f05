// Kernel launches that may use programmatic dependent launch (on unless EMBER_PDL=0 in the
// environment): a launch through launch_after may start before the kernel before it in the
// stream has ended, and its kernel waits (wait_for_prior_grids, attention_tiles.cuh) before it
// reads what earlier kernels wrote; its blocks' setup and their prefetches and loads of what no
// kernel writes (weights) overlap the earlier kernel's tail (or, with early_dependents, as much
// of the earlier kernel as the free slots allow). Only kernels that wait so may be
// launched this way (gemv.cuh's two kernels, cached_attention.cuh, reduce.cu's
// arg_split_kernel and arg_vector_kernel).
#pragma once
#include <cuda_runtime.h>

#include "kernels/cuda/runtime.h"

namespace ember::cuda::detail {

// Whether programmatic launch is on: unless EMBER_PDL=0 (read once).
bool programmatic_launch();
// Whether the kernels that take the choice (gemv.cuh, cached_attention.cuh) let the next kernel
// launch as their blocks start rather than after their loads: its blocks then take the slots
// this grid leaves free, get past their setup and prefetch their weights while this one runs.
// Its reads still wait for this grid's end (wait_for_prior_grids), so only where it starts
// moves. On with programmatic launch, unless EMBER_PDL_EARLY=0 (read once).
bool early_dependents();

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
