// CUDA thread blocks on the host, for checking kernels written over a few primitives (thread and
// block index, block barrier, warp exchange, dynamic shared memory; kernels/cuda/
// attention_tiles.cuh) on machines without a GPU. A block's threads are fibers (ucontext) run in
// turn on the calling thread, each until it reaches a barrier; when all have, the next phase
// starts. Every barrier is block-wide (a warp exchange too), which is right for kernels that call
// them in uniform control flow; a barrier that only some threads reach fails the run. Shared
// memory starts filled with 0xFF bytes (NaN in every float type), so reading what no thread wrote
// shows in the results.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>

namespace ember::test::emu {

int thread_index();
int64_t block_index();
int64_t block_count();  // the run's blocks (gridDim.x)
void barrier();
unsigned char* shared_memory();

// Storage for warp exchanges: one 8-byte slot a thread.
uint64_t* exchange_slots();

// The value v of thread thread_index() ^ lane_mask (lane_mask < 32: the same warp). Every
// thread of the block must call it.
template <class T>
T exchange(T v, int lane_mask) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  uint64_t* slots = exchange_slots();
  std::memcpy(&slots[thread_index()], &v, sizeof(T));
  barrier();
  T r;
  std::memcpy(&r, &slots[thread_index() ^ lane_mask], sizeof(T));
  barrier();  // every partner has read before the slots are written again
  return r;
}

// Storage for warp gathers: kGatherBytes a thread.
constexpr size_t kGatherBytes = 64;
unsigned char* gather_slots();

// The values v of the 32 threads of the calling thread's warp, in lane order (what a warp-wide
// instruction such as ldmatrix or mma reads from its lanes). Every thread of the block must call it.
template <class T>
std::array<T, 32> warp_gather(const T& v) {
  static_assert(sizeof(T) <= kGatherBytes);
  unsigned char* slots = gather_slots();
  std::memcpy(slots + size_t(thread_index()) * kGatherBytes, &v, sizeof(T));
  barrier();
  std::array<T, 32> all;
  const size_t first = size_t(thread_index() / 32 * 32);
  for (size_t l = 0; l < 32; ++l) std::memcpy(&all[l], slots + (first + l) * kGatherBytes, sizeof(T));
  barrier();  // every lane has read before the slots are written again
  return all;
}

// Runs body as `threads` threads of each of `blocks` blocks, one block after another. Throws
// std::runtime_error when the threads of a block disagree on a barrier or the body throws.
void run_blocks(int64_t blocks, int threads, size_t shared_bytes,
                const std::function<void()>& body);

}  // namespace ember::test::emu
