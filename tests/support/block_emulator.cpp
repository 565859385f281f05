// Fibers standing in for a CUDA block's threads (block_emulator.h).
#include "support/block_emulator.h"

#include <ucontext.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ember::test::emu {

namespace {
constexpr size_t kStackBytes = 256 * 1024;

struct Fiber {
  ucontext_t ctx;
  std::unique_ptr<char[]> stack;
  bool done = false;
};

struct State {
  ucontext_t main;
  std::vector<Fiber> fibers;
  std::vector<uint64_t> slots;
  std::vector<unsigned char> gather;  // kGatherBytes a thread
  std::vector<unsigned char> shared;  // 16 bytes of slack for alignment
  unsigned char* shared_base = nullptr;
  const std::function<void()>* body = nullptr;
  int current = 0;
  int64_t block = 0, blocks = 0;
  std::string error;
};
State* state = nullptr;  // set while run_blocks runs (one run at a time, on one thread)

void fiber_main() {
  try {
    (*state->body)();
  } catch (const std::exception& e) {
    if (state->error.empty()) state->error = e.what();
  }
  state->fibers[size_t(state->current)].done = true;
  // Returning resumes uc_link: the scheduler.
}

// Makes f start the body afresh when resumed.
[[gnu::noinline]] void start(State& s, Fiber& f) {
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.get();
  f.ctx.uc_stack.ss_size = kStackBytes;
  f.ctx.uc_link = &s.main;
  makecontext(&f.ctx, fiber_main, 0);
  f.done = false;
}

// Runs thread t until it reaches a barrier or finishes. Out of line (as start), so that no local
// of the scheduler's loop lives across a context switch.
[[gnu::noinline]] void resume(State& s, int t) {
  s.current = t;
  swapcontext(&s.main, &s.fibers[size_t(t)].ctx);
}
}  // namespace

int thread_index() {
  return state->current;
}
int64_t block_index() {
  return state->block;
}
int64_t block_count() {
  return state->blocks;
}
unsigned char* shared_memory() {
  return state->shared_base;
}
uint64_t* exchange_slots() {
  return state->slots.data();
}
unsigned char* gather_slots() {
  return state->gather.data();
}

void barrier() {
  swapcontext(&state->fibers[size_t(state->current)].ctx, &state->main);
}

void run_blocks(int64_t blocks, int threads, size_t shared_bytes,
                const std::function<void()>& body) {
  State s;
  s.fibers.resize(size_t(threads));
  for (Fiber& f : s.fibers) f.stack = std::make_unique<char[]>(kStackBytes);
  s.slots.assign(size_t(threads), 0);
  s.gather.assign(size_t(threads) * kGatherBytes, 0);
  s.shared.resize(shared_bytes + 16);
  const uintptr_t raw = reinterpret_cast<uintptr_t>(s.shared.data());
  s.shared_base = s.shared.data() + (16 - raw % 16) % 16;
  s.body = &body;
  s.blocks = blocks;
  state = &s;
  for (int64_t b = 0; b < blocks && s.error.empty(); ++b) {
    s.block = b;
    std::fill(s.shared.begin(), s.shared.end(), 0xFF);
    for (Fiber& f : s.fibers) start(s, f);
    // Phases: resume every thread once; all must stop at a barrier, or all must finish.
    for (bool running = true; running;) {
      int finished = 0;
      for (int t = 0; t < threads; ++t) {
        resume(s, t);
        finished += s.fibers[size_t(t)].done;
      }
      if (finished != 0 && finished != threads) {
        s.error = "block " + std::to_string(b) + ": " + std::to_string(finished) + " of " +
                  std::to_string(threads) + " threads finished while the others wait at a barrier";
        // The waiting fibers are abandoned (their stacks are freed with the state).
      }
      running = finished == 0 && s.error.empty();
    }
  }
  state = nullptr;
  if (!s.error.empty()) throw std::runtime_error("block emulation: " + s.error);
}

}  // namespace ember::test::emu
