// The CUDA runtime as the backend uses it: checked calls, the current device, one stream per
// device (all of ember's work on a device is ordered on it, which is what lets the caching
// allocator reuse a freed block at once).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "ember/error.h"
#include "kernels/cuda/fault.cuh"

namespace ember::cuda::detail {

// Raises an ember::Error naming `what` and the CUDA error when `e` is not cudaSuccess.
void check(cudaError_t e, const char* what);
// Makes `device` current on this thread (cheap when it already is).
void use_device(int device);
// Lets `kernel` take `smem` bytes of dynamic shared memory a block on `device` (past 48 KiB it
// needs the opt-in attribute, set once a kernel, device and size); false where the device
// offers a block less (the caller's error says what to do).
bool allow_shared(const void* kernel, int device, size_t smem, const char* what);
// The device's stream, created on first use.
cudaStream_t stream(int device);
// Counters a kernel may count its blocks' arrivals in: kCounters ints on the device, allocated
// and zeroed with its stream (so before any CUDA graph capture on it), zero at rest: a kernel
// sets back to 0 each counter it used before it ends. Kernels on the stream run in turn, so
// they may all use them.
// Work recorded on a side branch of a CUDA graph (cuda_graph::SideBranch) may run beside the
// stream's: it takes counters and library handles of its own (on this thread, while a
// SideBranchScope is alive).
constexpr int64_t kCounters = 1 << 16;
int* counters(int device);
bool on_side_branch();
class SideBranchScope {
 public:
  SideBranchScope();
  ~SideBranchScope();
  SideBranchScope(const SideBranchScope&) = delete;
  SideBranchScope& operator=(const SideBranchScope&) = delete;

 private:
  bool prev_;
};
// Raises an Error unless `device` names a visible device.
void check_device(int device, const char* what);
// The device's fault slot, as a pointer kernels can write (see fault.cuh).
Fault* fault_slot(int device);
// Raises the fault a kernel on `device` recorded, if any, and clears it. Called after every
// wait for the device, so the error surfaces at the first sync after the faulty kernel.
void raise_fault(int device);

}  // namespace ember::cuda::detail
