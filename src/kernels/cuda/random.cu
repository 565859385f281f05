// (being written)
#include "kernels/cuda/kernel_table.h"

namespace ember::cuda {

void register_random(KernelTable&) {}

}  // namespace ember::cuda
