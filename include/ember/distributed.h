// Data-parallel training across processes: a process group started by MPI (init, rank, world
// size) and collectives on tensors (all_reduce, broadcast, all_gather, reduce_scatter, barrier).
// Under `mpirun -np N prog`, each process calls distributed::init().
//
// CPU tensors go through MPI (Open MPI). CUDA tensors need the NCCL backend, which this build
// does not have yet: collectives on them raise an Error. Every rank must call the same
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
// on this host (MPI's shared-memory split). Calling it again is a no-op; Error in a build
// without MPI.
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

// Collectives over every rank. All work on CPU tensors of Bool (broadcast and all_gather only),
// Int32, Int64, Float16, BFloat16, Float32 and Float64, contiguous or not; Avg needs a floating
// dtype. Float16 and BFloat16 are reduced in float32 (converted, reduced, rounded back once).
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
