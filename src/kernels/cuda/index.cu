// (being written)
#include "kernels/cuda/kernel_table.h"

namespace ember::cuda {

void register_index(KernelTable&) {}

}  // namespace ember::cuda
