// The seam between ember::distributed's front end (argument checks, call headers, timeouts,
// non-contiguous tensors) and the libraries that move the bytes: a Backend per device type.
// MPI (mpi_backend.cpp) serves CPU tensors and is also the group's control channel (ranks,
// headers, abort, and NCCL's unique id); NCCL (nccl_backend.cpp) serves CUDA tensors.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ember/distributed.h"

namespace ember::distributed {

// What a rank passed to one collective; ranks compare theirs before moving any data.
struct CallHeader {
  static constexpr int kMaxDims = 8;  // dims past these are compared through numel only
  int64_t seq = 0;                    // collectives this rank has called before
  int64_t op = 0;                     // Collective
  int64_t dtype = 0;
  int64_t reduce = 0;                 // ReduceOp, or -1
  int64_t root = -1;
  int64_t ndim = 0;
  int64_t numel = 0;
  int64_t device = 0;                 // DeviceType
  int64_t sizes[kMaxDims] = {};
  bool operator==(const CallHeader&) const = default;
};
static_assert(sizeof(CallHeader) == 16 * sizeof(int64_t));

// Finalize: a rank leaving the group (finalize(), or the exit of a process that did not call it)
// exchanges a header too, so that ranks still calling collectives learn that it left.
enum class Collective : uint8_t { AllReduce, Broadcast, AllGather, ReduceScatter, Barrier, Finalize };
std::string_view collective_name(Collective c);
std::string_view reduce_op_name(ReduceOp op);

// A request in flight. test() polls it; finish() runs once it completed (the backend's own
// finishing: rounding a float32 buffer back into a 16-bit tensor, say).
struct PendingOp {
  virtual ~PendingOp() = default;
  virtual bool test() = 0;
  virtual void finish() {}
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Collectives on contiguous tensors of this backend's device, started without waiting. The
  // front end has checked dtypes and shapes and keeps the tensors alive until the op finished.
  virtual std::unique_ptr<PendingOp> all_reduce(const Tensor& t, ReduceOp op) = 0;
  virtual std::unique_ptr<PendingOp> broadcast(const Tensor& t, int root) = 0;
  virtual std::unique_ptr<PendingOp> all_gather(const Tensor& in, const Tensor& out) = 0;
  virtual std::unique_ptr<PendingOp> reduce_scatter(const Tensor& in, const Tensor& out,
                                                    ReduceOp op) = 0;
  virtual std::unique_ptr<PendingOp> barrier() = 0;
};

// The launch: ranks, the header exchange and ending the job. One per process (MPI's world).
class World {
 public:
  virtual ~World() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  // Every rank's header of this call, by rank, started without waiting (written into `all`).
  virtual std::unique_ptr<PendingOp> exchange(const CallHeader& mine,
                                              std::vector<CallHeader>& all) = 0;
  // The backend for CPU tensors.
  virtual Backend& cpu_backend() = 0;
  // Ends every rank of the job with `code` (does not return).
  [[noreturn]] virtual void abort(int code) = 0;
  // Whether the library can still be called (the program may have shut MPI down itself).
  virtual bool usable() const = 0;
  // Leaves the launch (the last call of this process into the library).
  virtual void finalize() = 0;
};

// Starts MPI (or joins an MPI program that already started it); Error in a build without MPI.
std::unique_ptr<World> make_mpi_world();
// Rank 0 of a world of one (single_world.cpp): init() in a build without MPI when the
// environment asks for no more than one process.
std::unique_ptr<World> make_single_world();

// The backend for CUDA tensors on `device`: NCCL (nccl_backend.cpp, in builds with CUDA and
// NCCL's header), or an Error saying the build has none (no_nccl.cpp). Every rank calls it in
// the same collective; `share_id(bytes, n)` copies rank 0's n bytes to every rank.
std::unique_ptr<Backend> make_nccl_backend(int device, int rank, int size,
                                           void (*share_id)(void* bytes, size_t n));

}  // namespace ember::distributed
