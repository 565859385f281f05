// Data-parallel training across processes: a process group started by MPI (init, rank, world
// size), collectives on tensors (all_reduce, broadcast, all_gather, reduce_scatter, barrier), and
// DistributedDataParallel, which averages a module's gradients over the ranks during backward.
// Under `mpirun -np N prog`, each process calls distributed::init(), builds the model, wraps it
// in nn::DistributedDataParallel and trains on its own rows of each batch.
//
// CPU tensors go through MPI (Open MPI); CUDA tensors through NCCL, in builds with the CUDA
// backend and NCCL's header (the library is loaded by the first collective on a CUDA tensor, on
// the device's stream), and elsewhere collectives on them raise an Error. Every rank must call the same
// collectives in the same order with tensors of the same dtype and shape; by default each
// collective first exchanges a small header (op, dtype, shape, root, call count) and raises on
// every rank, naming the ranks that differ, when they disagree. A collective waits at most
// InitOptions::timeout_s for the other ranks, then raises an Error naming the op and the rank.
// An exception that leaves main on one rank ends every rank (MPI_Abort from a terminate
// handler), so no rank waits for one that is gone.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ember/nn.h"
#include "ember/tensor.h"

namespace ember::distributed {

enum class ReduceOp : uint8_t { Sum, Avg, Max, Min };

struct InitOptions {
  // Seconds a collective waits for the other ranks before raising an Error (0: no limit).
  // EMBER_DIST_TIMEOUT (seconds) overrides it.
  double timeout_s = 600;
  // Exchange a header before each collective and raise when the ranks disagree (one extra
  // small message per call). EMBER_DIST_CHECK=0 turns it off.
  bool check_calls = true;
  // Install a std::terminate handler that prints the uncaught exception with the rank and
  // calls MPI_Abort, so that the other ranks end too instead of waiting for this one.
  bool abort_on_uncaught_exception = true;
};

// Whether ember was built with MPI (its CPU backend and launcher).
bool built_with_mpi();
// Joins the process group of an MPI launch (mpirun -np N: rank and world size come from MPI;
// a process started without mpirun is a world of one). RANK and WORLD_SIZE, when a launcher
// sets them, must agree with MPI (Error naming both otherwise: MPI's are the ones ember can
// communicate with); LOCAL_RANK, when set, gives local_rank(), else the rank among the processes
// on this host (MPI's shared-memory split). Calling it again is a no-op. In a build without
// MPI, a process whose environment asks for one rank (WORLD_SIZE unset or 1, RANK unset or 0)
// is a world of one: CPU collectives keep their data, CUDA tensors go through NCCL as a
// communicator of one rank; any other WORLD_SIZE is an Error there.
void init(const InitOptions& opts = {});
// Whether init() has run (and finalize() not yet).
bool is_initialized();
// Leaves the group (MPI_Finalize, when init() started MPI); at exit this happens by itself.
// Collectives after it raise an Error.
void finalize();
// This process's rank in [0, world_size()), the number of ranks, the rank among the processes
// on this host (the GPU to use); Error before init().
int rank();
int world_size();
int local_rank();

// A collective started by an *_async call. The tensors it was given must not be read or written
// until wait() returns.
class Work {
 public:
  struct Impl;
  // An empty Work (wait() returns at once), or one holding a started collective (the *_async
  // calls make those).
  Work() = default;
  explicit Work(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  // Waits for the collective (at most the group's timeout: Error naming the op and rank then)
  // and finishes it (averages, copies into non-contiguous or 16-bit tensors); a second call
  // returns at once.
  void wait();
  // Whether wait() would return without waiting.
  bool is_completed();

 private:
  std::shared_ptr<Impl> impl_;
};

// Collectives over every rank. All work on tensors of Bool (broadcast and all_gather only),
// Int32, Int64, Float16, BFloat16, Float32 and Float64, contiguous or not; Avg needs a floating
// dtype. On the CPU, Float16 and BFloat16 are reduced in float32 (converted, reduced, rounded
// back once); NCCL reduces them natively.
// A collective is not differentiable and, inside a compiled function, is a graph break.

// Reduces t over the ranks, in place: every rank ends with the sum (average, max, min).
void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum);
// all_reduce, started and returned without waiting.
Work all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::Sum);
// Copies rank root's t into t on every other rank, in place.
void broadcast(const Tensor& t, int root = 0);
// Every rank's t ([n, ...] the same shape on each) concatenated along dim 0 in rank order:
// [world_size * n, ...] (a 0-dim t gives [world_size]).
Tensor all_gather(const Tensor& t);
// t ([world_size * n, ...], the same on each rank) reduced over the ranks, and of the result
// this rank's block of n rows: [n, ...].
Tensor reduce_scatter(const Tensor& t, ReduceOp op = ReduceOp::Sum);
// Returns once every rank has called it.
void barrier();

}  // namespace ember::distributed

namespace ember::nn {

// What a DistributedDataParallel has done (for tests and logs).
struct DDPStats {
  int64_t syncs = 0;                 // averagings: backwards outside no_sync, and sync_grads()
  int64_t buckets_started_early = 0;  // by a grad hook, as soon as the bucket was full
  int64_t buckets_started_late = 0;   // when the backward ended (a grad missing) or by sync_grads
};

struct DDPOptions {
  // Gradients are all-reduced in buckets of about this many MiB (PyTorch's bucket_cap_mb).
  double bucket_cap_mb = 25;
  // Broadcast the module's buffers (BatchNorm statistics) from rank 0 at construction too.
  bool broadcast_buffers = true;
};

// Data parallelism for a module (PyTorch's DistributedDataParallel): each rank runs the module
// on its own part of the batch, and backward leaves every rank with the average of the ranks'
// gradients, so that the same optimizer step keeps the replicas equal.
//
// At construction rank 0's parameters (and buffers) are broadcast to every rank, and the
// parameters are grouped into buckets of about bucket_cap_mb, in reverse registration order
// (the order backward reaches them). A hook on each parameter (autograd's post-accumulate-grad
// hook) copies its grad into its bucket when backward has accumulated it; a full bucket's
// average is started at once (all_reduce_async, buckets in the same order on every rank), so
// the exchange of one bucket overlaps the backward of the layers before it. When the backward
// ends (queue_backward_callback) the remaining buckets are started, every bucket is waited for,
// and the averages are written into the parameters' .grad. A parameter no rank gave a grad
// gets zeros; one that only some ranks gave a grad gets the average with zeros for the others.
//
// A compiled training step (compile(model.loss) followed by loss.backward()) works unchanged:
// its backward graph runs as one autograd node, which hands every parameter its grad when it
// ends, so the hooks fire then and every bucket's all-reduce starts after the compiled backward
// (no overlap with its kernels, but none of its work waits on the exchange either).
//
// The module is used directly (DDP adds no forward); it must outlive this object, and its
// parameters must not be replaced while it lives (to(), tie_parameter()).
class DistributedDataParallel {
 public:
  // Registers the hooks and broadcasts from rank 0 (a collective: every rank constructs it
  // with a module of the same parameter shapes). Error before distributed::init().
  explicit DistributedDataParallel(Module& module, DDPOptions opts = {});
  // Removes the hooks.
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // The wrapped module.
  Module& module() const { return module_; }

  // While the returned guard lives, backward accumulates grads locally without communicating
  // (gradient accumulation, PyTorch's no_sync()); the first backward after it averages the sum.
  class NoSync {
   public:
    // Turns syncing off on `ddp` until destroyed, then restores the previous state.
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp), prev_(ddp.sync_) { ddp.sync_ = false; }
    ~NoSync() { ddp_.sync_ = prev_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  // A NoSync guard for this object.
  NoSync no_sync() { return NoSync(*this); }

  // Averages every parameter's .grad over the ranks now (parameters without a grad count as
  // zeros and get one), as the backward hooks do: for grads made without backward() or after a
  // backward under no_sync(). A collective: every rank must call it.
  void sync_grads();
  // Broadcasts the module's buffers from rank 0 (constructed with broadcast_buffers, this runs
  // once there; call it again to resynchronize running statistics).
  void sync_buffers();
  // The parameter names of each bucket, in the order buckets are reduced.
  std::vector<std::vector<std::string>> bucket_names() const;
  // The counters since construction.
  const DDPStats& stats() const { return stats_; }

 private:
  struct Bucket;
  void on_grad_ready(size_t param_index);
  void launch_ready_buckets(bool all);
  void finish_backward();
  Module& module_;
  DDPOptions opts_;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<uint64_t> hooks_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  struct Slot {
    size_t bucket = 0, entry = 0;  // buckets_[bucket]->params[entry] is the parameter
    int64_t offset = 0;            // where its grad starts in the bucket, in elements
  };
  std::vector<Slot> slot_of_;  // by parameter
  DDPStats stats_;
  bool sync_ = true;
  std::weak_ptr<char> queued_;  // alive while this backward's end callback is queued
  size_t next_launch_ = 0;    // buckets [0, next_launch_) have been started this backward
};

}  // namespace ember::nn
