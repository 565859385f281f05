// CompileOptions::mode = "reduce-overhead" on a GPU: a compiled graph whose runs are recorded
// into a CUDA graph (kernels/cuda_graph.h) and replayed as one launch.
//
// The first call runs the graph as usual (its kernels built, its libraries' plans and workspaces
// made); the next one records it. An input given to both calls (the same tensor storage: a
// parameter, a cache updated in place) or lying in a recording's pool (a saved activation of a
// recorded forward) is read where it lies; any other is copied into a buffer of the recording
// before each replay (and copied back after, when the graph writes into it). A replay whose
// in-place inputs moved runs unrecorded; when they are found at the same new place twice, that
// place is recorded too (up to 4 recordings, the least recently replayed dropped first). Outputs
// live in the recording's pool: those the caller still holds when the next replay would
// overwrite them are first moved to memory of their own, so an output is never read stale. A
// graph that draws random numbers inside it, or whose recording fails, runs unrecorded from
// then on, with one warning saying why.
#pragma once
#include <memory>

#include "capture/capture.h"

namespace ember::compiler {

// Counts steps a recording put on a side branch (CudaGraphCounters::side_steps).
void count_side_steps(int64_t n);

std::shared_ptr<const capture::Runnable> record_cuda_graphs(
    std::shared_ptr<const capture::Runnable> inner, std::shared_ptr<const graph::Graph> g,
    Device device);

}  // namespace ember::compiler
