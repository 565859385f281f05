// Per-op timing for finding where eager time goes: with EMBER_PROFILE_OPS=1 in the
// environment, every kernel the dispatcher runs is timed (the device synchronized before and
// after it, so GPU ops are timed whole; this slows the program) and a table of ops by total
// time is printed to stderr when the process exits.
#pragma once
#include "ember/device.h"
#include "ops/op.h"

namespace ember::op_profile {

// Whether EMBER_PROFILE_OPS is set (read once).
bool enabled();
// Adds one run of `op` on `device` taking `ms`.
void record(OpId op, Device device, double ms);
// Waits for the device's queued work (no-op on the CPU).
void drain(Device device);

}  // namespace ember::op_profile
