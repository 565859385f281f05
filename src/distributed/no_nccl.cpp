// ember::distributed in a build without CUDA or without NCCL's header: CUDA tensors cannot be
// communicated, and the first collective on one says so.
#include "distributed/backend.h"

namespace ember::distributed {

std::unique_ptr<Backend> make_nccl_backend(int device, int rank, int size,
                                           void (*share_id)(void* bytes, size_t n)) {
  EMBER_FAIL("distributed on rank ", rank, ": a cuda:", device, " tensor needs the NCCL backend, "
             "which this build of ember does not have (it needs the CUDA backend and NCCL's "
             "nccl.h at configure time); move the tensor to the CPU (.cpu()) for MPI");
}

}  // namespace ember::distributed
