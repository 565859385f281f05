// The live modules, for capture: a tensor met while tracing that sits in a module's parameter
// or buffer slot is re-read from that slot on each replay (src/capture/sources.cpp).
#pragma once
#include <functional>

#include "ember/nn.h"

namespace ember::nn::detail {
// Calls f on every module alive now, under the registry's lock (f must not create or destroy
// modules).
void for_each_live_module(const std::function<void(const Module&)>& f);
}  // namespace ember::nn::detail
