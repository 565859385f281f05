// Recording a device's stream into a CUDA graph and launching it (kernels/cuda_graph.h).
#include <string>

#include "kernels/cuda/runtime.h"
#include "kernels/cuda_graph.h"

namespace ember::cuda_graph {

class Recording {
 public:
  Recording(int device, cudaGraphExec_t exec, size_t nodes)
      : device(device), exec(exec), nodes(nodes) {}
  ~Recording() {
    // Freed once a replay still queued has finished (the runtime defers it).
    cudaGraphExecDestroy(exec);
  }
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;
  const int device;
  const cudaGraphExec_t exec;
  const size_t nodes;
};

bool available() { return true; }

void begin(int device) {
  cuda::detail::use_device(device);
  // Relaxed: the allocator may take a new segment (cudaMalloc) for the pool while recording.
  cuda::detail::check(
      cudaStreamBeginCapture(cuda::detail::stream(device), cudaStreamCaptureModeRelaxed),
      "starting a CUDA graph recording (cudaStreamBeginCapture)");
}

std::shared_ptr<Recording> end(int device) {
  cuda::detail::use_device(device);
  cudaGraph_t g = nullptr;
  cudaError_t e = cudaStreamEndCapture(cuda::detail::stream(device), &g);
  if (e != cudaSuccess || !g) {
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    EMBER_FAIL("ending a CUDA graph recording (cudaStreamEndCapture): ", cudaGetErrorString(e),
               "; something in the run was not recordable");
  }
  size_t n = 0;
  cudaGraphGetNodes(g, nullptr, &n);
  cudaGraphExec_t exec = nullptr;
  e = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  if (e != cudaSuccess) {
    cudaGetLastError();
    EMBER_FAIL("instantiating a recorded CUDA graph (cudaGraphInstantiate): ",
               cudaGetErrorString(e));
  }
  return std::make_shared<Recording>(device, exec, n);
}

void abort(int device) {
  cuda::detail::use_device(device);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(cuda::detail::stream(device), &status);
  if (status != cudaStreamCaptureStatusNone) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(cuda::detail::stream(device), &g);
    if (g) cudaGraphDestroy(g);
  }
  cudaGetLastError();  // the error the failed recording left
}

void launch(const Recording& r) {
  cuda::detail::use_device(r.device);
  cuda::detail::check(cudaGraphLaunch(r.exec, cuda::detail::stream(r.device)),
                      "launching a recorded CUDA graph (cudaGraphLaunch)");
}

size_t nodes(const Recording& r) { return r.nodes; }

}  // namespace ember::cuda_graph
