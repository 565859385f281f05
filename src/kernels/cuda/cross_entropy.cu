// (being written)
#include "kernels/cuda/kernel_table.h"

namespace ember::cuda {

void register_losses(KernelTable&) {}

}  // namespace ember::cuda
