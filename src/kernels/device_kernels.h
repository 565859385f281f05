// Kernels of devices other than the CPU, by op. The CPU's kernel of each op sits in its op
// table entry (OpImpl::cpu); a device backend keeps its own table, filled when first used, and
// the dispatcher asks it here. An op a device has no kernel for is an error naming both.
#pragma once
#include "ops/op_impl.h"

namespace ember {

// The kernel of `op` for tensors on `device`; null when the device's backend has none.
KernelFn device_kernel(OpId op, Device device);

}  // namespace ember
