// Per-op timing for finding where eager time goes: with EMBER_PROFILE_OPS=1 in the
// environment, every kernel the dispatcher runs is timed and a table of ops by total time is
// printed to stderr when the process exits. CPU kernels are timed on the host; GPU kernels by
// events recorded around them in the device's stream (their time on the GPU, read in batches,
// so the program is not synchronized op by op).
#pragma once
#include <span>
#include <string>

#include "ember/device.h"
#include "ember/tensor.h"
#include "ops/op.h"

namespace ember::op_profile {

// Whether EMBER_PROFILE_OPS is set (read once). EMBER_PROFILE_OPS=shapes keys the table by
// op and input shapes and dtypes instead of by op alone.
bool enabled();
// The table's row for a run of `op` on `inputs`: the op's name, with the inputs' shapes and
// dtypes under EMBER_PROFILE_OPS=shapes.
std::string row_key(OpId op, std::span<const Tensor> inputs);
// Adds one run of the row `key` on `device` taking `ms` (host-timed ops).
void record(const std::string& key, Device device, double ms);

// Drops what was recorded so far (GPU timings pending are read first).
void restart();
// Prints the table now, headed by `title`, and starts a new one (no-op when not enabled).
void print_now(const std::string& title);

// Events around a GPU kernel: begin before launching it, end after.
struct GpuMark {
  int slot = -1;
};
GpuMark gpu_begin(Device device);
void gpu_end(GpuMark mark, const std::string& key, Device device);
// Gives begin's event back when nothing was launched after it.
void gpu_cancel(GpuMark mark);

}  // namespace ember::op_profile
