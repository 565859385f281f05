// CPU reduction kernels.
#pragma once
#include "ops/op_impl.h"

namespace ember::cpu {

void sum(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);

}  // namespace ember::cpu
