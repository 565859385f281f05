// EMBER_PROFILE=1: the wall time of every step of every compiled graph (a generated kernel, a
// batch of kernels, or an op left to the eager kernels), summed over all calls and printed as
// a table to stderr when the process exits, the most expensive steps first.
#pragma once
#include <chrono>
#include <string>

namespace ember::compiler {

bool step_profile_enabled();
// Turns profiling on or off from code (tests), whatever EMBER_PROFILE says.
void set_step_profile(bool on);
// The table printed at exit, for what was recorded so far; empty when nothing was.
std::string step_profile_table();
// Forgets what was recorded.
void reset_step_profile();

// Adds `ms` to the steps described as `name` (steps with equal descriptions, a layer's
// kernel repeated per layer say, add up).
void record_step(const std::string& name, double ms);

// Times one step when profiling is on; free otherwise (one predictable branch).
template <class Describe>
class StepTimer {
 public:
  // describe() is called after the clock stops, only when profiling.
  explicit StepTimer(Describe describe) : on_(step_profile_enabled()), describe_(describe) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~StepTimer() {
    if (!on_) return;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
    record_step(describe_(), ms);
  }
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

 private:
  bool on_;
  Describe describe_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace ember::compiler
