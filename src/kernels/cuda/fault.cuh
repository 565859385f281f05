// Errors found inside a kernel (an index out of range, a weight no distribution can have). A
// kernel cannot throw, and a device-side trap would poison the whole context, so a kernel that
// meets bad input records the first such fault in a per-device slot (host memory the device
// writes through), skips the bad element, and returns. The host checks the slot whenever it
// waits for the device (copies to the host, item(), cuda::synchronize()) and raises an
// ember::Error naming the op and the value; the context stays healthy and work goes on.
#pragma once
#include <cstdint>

namespace ember::cuda {

enum class FaultKind : int32_t {
  None = 0,
  IndexOutOfRange = 1,  // value = the index, bound = the dim's size, dim = the dim
  BadWeight = 2,        // value = the element's position, dim = the row (multinomial)
  ZeroRow = 3,          // dim = the row whose weights sum to zero
  TooFewCategories = 4, // value = positive weights in row `dim`, bound = samples asked
  TargetOutOfRange = 5, // value = the target, bound = the number of classes
};

// One slot per device. `op` is the OpId of the op whose kernel found the fault.
struct Fault {
  int32_t kind;
  int32_t op;
  int64_t value;
  int64_t bound;
  int64_t dim;
};

#ifdef __CUDACC__
// Records a fault unless one is pending already (the first one wins).
__device__ inline void report_fault(Fault* slot, FaultKind kind, int32_t op, int64_t value,
                                    int64_t bound, int64_t dim) {
  if (atomicCAS(&slot->op, -1, op) != -1) return;
  slot->value = value;
  slot->bound = bound;
  slot->dim = dim;
  __threadfence_system();
  atomicExch(&slot->kind, int32_t(kind));
}
#endif

}  // namespace ember::cuda
