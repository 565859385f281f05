// Recording a device's stream into a CUDA graph and launching it (kernels/cuda_graph.h).
#include <algorithm>
#include <string>
#include <vector>

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

namespace {
// The device whose stream this thread is recording (begin to end or abort), or -1.
thread_local int tl_recording = -1;
}  // namespace

void begin(int device) {
  cuda::detail::use_device(device);
  // Relaxed: the allocator may take a new segment (cudaMalloc) for the pool while recording.
  cuda::detail::check(
      cudaStreamBeginCapture(cuda::detail::stream(device), cudaStreamCaptureModeRelaxed),
      "starting a CUDA graph recording (cudaStreamBeginCapture)");
  tl_recording = device;
}

std::shared_ptr<Recording> end(int device) {
  tl_recording = -1;
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
  tl_recording = -1;
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

namespace {

using Nodes = std::vector<cudaGraphNode_t>;

// The nodes the stream's next recorded work will depend on.
Nodes dependencies(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  size_t n = 0;
  cuda::detail::check(cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, nullptr, &n),
                      "cudaStreamGetCaptureInfo");
  return Nodes(deps, deps + n);
}

void set_dependencies(cudaStream_t stream, Nodes deps) {
  std::sort(deps.begin(), deps.end());
  deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
  cuda::detail::check(cudaStreamUpdateCaptureDependencies(stream, deps.data(), nullptr, deps.size(),
                                                          cudaStreamSetCaptureDependencies),
                      "cudaStreamUpdateCaptureDependencies");
}

Nodes joined(Nodes a, const Nodes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

struct SideBranch::State {
  cudaStream_t stream = nullptr;
  bool recording = false;
  Nodes last;                // the branch's latest work
  std::vector<void*> held;   // blocks its work freed
  int steps = 0;
};

SideBranch::SideBranch(int device) : s_(std::make_unique<State>()) {
  s_->recording = tl_recording == device;
  if (s_->recording) s_->stream = cuda::detail::stream(device);
}

SideBranch::~SideBranch() {
  try {
    join();
  } catch (...) {  // the recording failed (it is discarded): the blocks go back all the same
    free_held(s_->held);
  }
}

bool SideBranch::recording() const { return s_->recording; }
int SideBranch::steps() const { return s_->steps; }

void SideBranch::run(const std::function<void()>& work) {
  if (!s_->recording) {
    work();
    return;
  }
  const Nodes main = dependencies(s_->stream);
  set_dependencies(s_->stream, joined(main, s_->last));
  try {
    cuda::detail::SideBranchScope side;
    FreesHeld hold(&s_->held);
    work();
  } catch (...) {
    set_dependencies(s_->stream, joined(main, s_->last));
    s_->last.clear();
    throw;
  }
  s_->last = dependencies(s_->stream);
  set_dependencies(s_->stream, main);
  s_->steps++;
}

void SideBranch::join() {
  if (!s_->recording) return;
  if (!s_->last.empty()) {
    set_dependencies(s_->stream, joined(dependencies(s_->stream), s_->last));
    s_->last.clear();
  }
  free_held(s_->held);
}

}  // namespace ember::cuda_graph
