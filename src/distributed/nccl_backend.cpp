// The NCCL backend: collectives on CUDA tensors, queued on the device's stream (ember orders all
// work on a device on one stream, so they follow the kernels that made their inputs). NCCL is
// loaded with dlopen when the first CUDA collective runs ($EMBER_NCCL, else libnccl.so.2), so
// a build with it runs without NCCL until a CUDA tensor is communicated. Only nccl.h's types
// are compiled in. The op completes, as far as the front end's wait is concerned, when an event
// recorded after it on the stream has passed; NCCL's asynchronous errors are raised then.
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>

#include "distributed/backend.h"
#include "kernels/cuda/runtime.h"

namespace ember::distributed {

namespace {

struct NcclApi {
  ncclResult_t (*get_unique_id)(ncclUniqueId*);
  ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*comm_destroy)(ncclComm_t);
  ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*);
  const char* (*get_error_string)(ncclResult_t);
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t);
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                             cudaStream_t);
  ncclResult_t (*reduce_scatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                 ncclComm_t, cudaStream_t);
};

template <class F>
void resolve(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  EMBER_CHECK(fn, "distributed: NCCL's library lacks ", name, " (", dlerror(), ")");
}

const NcclApi& nccl() {
  static const NcclApi api = [] {
    const char* path = std::getenv("EMBER_NCCL");
    if (!path || !*path) path = "libnccl.so.2";
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    EMBER_CHECK(lib, "distributed: a CUDA collective needs NCCL, and ", path,
                " could not be loaded (", dlerror(), "); install NCCL or set EMBER_NCCL to the "
                "library's path");
    NcclApi a{};
    resolve(lib, "ncclGetUniqueId", a.get_unique_id);
    resolve(lib, "ncclCommInitRank", a.comm_init_rank);
    resolve(lib, "ncclCommDestroy", a.comm_destroy);
    resolve(lib, "ncclCommGetAsyncError", a.comm_get_async_error);
    resolve(lib, "ncclGetErrorString", a.get_error_string);
    resolve(lib, "ncclAllReduce", a.all_reduce);
    resolve(lib, "ncclBroadcast", a.broadcast);
    resolve(lib, "ncclAllGather", a.all_gather);
    resolve(lib, "ncclReduceScatter", a.reduce_scatter);
    return a;
  }();
  return api;
}

void check_nccl(ncclResult_t r, const char* call, int rank) {
  EMBER_CHECK(r == ncclSuccess, "distributed: ", call, " failed on rank ", rank, ": ",
              nccl().get_error_string(r));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::Bool: return ncclUint8;  // moved, never reduced (the front end refuses)
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  return ncclSum;
}

// Done when the event recorded after the op on the stream has passed.
struct StreamOp : PendingOp {
  cudaEvent_t event = nullptr;
  ncclComm_t comm = nullptr;
  int rank = 0;
  ~StreamOp() override {
    if (event) cudaEventDestroy(event);
  }
  bool test() override {
    ncclResult_t async = ncclSuccess;
    check_nccl(nccl().comm_get_async_error(comm, &async), "ncclCommGetAsyncError", rank);
    check_nccl(async, "a queued NCCL collective", rank);
    const cudaError_t e = cudaEventQuery(event);
    if (e == cudaErrorNotReady) return false;
    cuda::detail::check(e, "distributed: waiting for an NCCL collective");
    return true;
  }
};

class NcclBackend : public Backend {
 public:
  NcclBackend(int device, int rank, int size, void (*share_id)(void*, size_t))
      : device_(device), rank_(rank) {
    cuda::detail::check_device(device, "distributed (NCCL)");
    cuda::detail::use_device(device);
    ncclUniqueId id{};
    if (rank == 0) check_nccl(nccl().get_unique_id(&id), "ncclGetUniqueId", rank);
    share_id(&id, sizeof id);
    check_nccl(nccl().comm_init_rank(&comm_, size, id, rank), "ncclCommInitRank", rank);
  }
  ~NcclBackend() override {
    if (comm_) nccl().comm_destroy(comm_);
  }
  std::string_view name() const override { return "nccl"; }

  std::unique_ptr<PendingOp> all_reduce(const Tensor& t, ReduceOp op) override {
    return queue([&](cudaStream_t s) {
      return nccl().all_reduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()),
                               nccl_type(t.dtype()), nccl_op(op), comm_, s);
    }, "ncclAllReduce");
  }
  std::unique_ptr<PendingOp> broadcast(const Tensor& t, int root) override {
    return queue([&](cudaStream_t s) {
      return nccl().broadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()),
                              nccl_type(t.dtype()), root, comm_, s);
    }, "ncclBroadcast");
  }
  std::unique_ptr<PendingOp> all_gather(const Tensor& in, const Tensor& out) override {
    return queue([&](cudaStream_t s) {
      return nccl().all_gather(in.data_ptr(), out.data_ptr(), size_t(in.numel()),
                               nccl_type(in.dtype()), comm_, s);
    }, "ncclAllGather");
  }
  std::unique_ptr<PendingOp> reduce_scatter(const Tensor& in, const Tensor& out,
                                            ReduceOp op) override {
    return queue([&](cudaStream_t s) {
      return nccl().reduce_scatter(in.data_ptr(), out.data_ptr(), size_t(out.numel()),
                                   nccl_type(in.dtype()), nccl_op(op), comm_, s);
    }, "ncclReduceScatter");
  }
  std::unique_ptr<PendingOp> barrier() override {
    EMBER_FAIL("distributed: internal: barrier runs on the MPI backend");
  }

 private:
  // Queues call(stream) on the device's stream and an event after it.
  template <class F>
  std::unique_ptr<PendingOp> queue(F&& call, const char* what) {
    cuda::detail::use_device(device_);
    cudaStream_t s = cuda::detail::stream(device_);
    check_nccl(call(s), what, rank_);
    auto op = std::make_unique<StreamOp>();
    op->comm = comm_;
    op->rank = rank_;
    cuda::detail::check(cudaEventCreateWithFlags(&op->event, cudaEventDisableTiming), what);
    cuda::detail::check(cudaEventRecord(op->event, s), what);
    return op;
  }

  int device_, rank_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_nccl_backend(int device, int rank, int size,
                                           void (*share_id)(void* bytes, size_t n)) {
  return std::make_unique<NcclBackend>(device, rank, size, share_id);
}

}  // namespace ember::distributed
