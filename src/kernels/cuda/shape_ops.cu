// (being written)
#include "kernels/cuda/kernel_table.h"

namespace ember::cuda {

void register_shape_ops(KernelTable&) {}

}  // namespace ember::cuda
