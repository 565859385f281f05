// CUDA graphs for compiled graphs (CompileOptions::mode = "reduce-overhead"): the work a run
// puts on a device's stream recorded once and launched again as one graph, with the memory it
// allocates taken from a private pool that nothing else allocates from, so that every replay
// finds its buffers where the recording left them. src/kernels/cuda/graph.cpp and the
// allocator implement it; a build without CUDA records nothing (available() is false).
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "ember/tensor_impl.h"

namespace ember::cuda_graph {

// Whether this build can record CUDA graphs.
bool available();

// Device memory owned by one recording: blocks allocated while a PoolScope names it come from
// its own segments, and return to them when freed. When the pool is dropped its segments go
// back to the device's shared cache (a block still in use goes there once it is freed).
class Pool;
std::shared_ptr<Pool> new_pool(int device);

// While alive, this thread's allocations on the pool's device come from the pool (with a null
// pool: from the device's shared cache, whatever scope encloses it).
class PoolScope {
 public:
  explicit PoolScope(Pool* pool);
  ~PoolScope();
  PoolScope(const PoolScope&) = delete;
  PoolScope& operator=(const PoolScope&) = delete;

 private:
  Pool* prev_;
};

// Whether `data` (a storage's block) belongs to some recording's pool.
bool in_a_pool(const void* data);

// Device memory the pool's segments take (what its recording keeps reserved), and that of every
// pool alive in the process.
size_t pool_bytes(const Pool& pool);
size_t live_pool_bytes();

// Gives `s` a block of the device's shared cache holding its bytes (copied in the order of the
// device's stream) in place of the block it had, which it frees (or, for storage it did not
// own, leaves). Every tensor on `s` sees the new block.
void move_out(Storage& s);

// Blocks freed on this thread while a FreesHeld scope is alive stay allocated, listed in
// `into`, until free_held(into) frees them: work recorded on a side branch may still be using
// them after the host has moved on.
class FreesHeld {
 public:
  explicit FreesHeld(std::vector<void*>* into);
  ~FreesHeld();
  FreesHeld(const FreesHeld&) = delete;
  FreesHeld& operator=(const FreesHeld&) = delete;

 private:
  std::vector<void*>* prev_;
};
void free_held(std::vector<void*>& blocks);

// Work recorded beside the stream's own (a training step's weight grads beside its input grads).
// While this thread records the device's stream (begin() to end()), the work run() runs goes
// into the graph depending on all that was recorded before it (so it may take memory the
// stream's earlier work freed) and on the branch's earlier work, with the branch's counters and
// library handles (cuda::detail::SideBranchScope) and with the blocks it frees held; the
// stream's later work does not wait for it until join(), which also frees the held blocks. The
// caller keeps what the work reads alive until join() and joins before anything reads what it
// wrote. Not recording, run() runs the work in line. Destruction joins.
class SideBranch {
 public:
  explicit SideBranch(int device);
  ~SideBranch();
  SideBranch(const SideBranch&) = delete;
  SideBranch& operator=(const SideBranch&) = delete;
  bool recording() const;
  void run(const std::function<void()>& work);
  void join();
  // Steps run() recorded on the branch.
  int steps() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// A recorded CUDA graph, ready to launch.
class Recording;
// Starts recording the device's stream (nothing queued on it runs until launch).
void begin(int device);
// Ends the recording and instantiates it; raises (the recording discarded) when CUDA refused
// something in it.
std::shared_ptr<Recording> end(int device);
// Ends a recording that failed part way, discarding it and the error it left.
void abort(int device);
// Queues the recorded work on the device's stream.
void launch(const Recording& r);
// The recorded graph's node count (kernels, copies, memsets).
size_t nodes(const Recording& r);

}  // namespace ember::cuda_graph
