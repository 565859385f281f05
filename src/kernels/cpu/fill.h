// Filling tensors with constants and ranges.
#pragma once
#include "ops/op_impl.h"

namespace ember::cpu {

void full(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void arange(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);

}  // namespace ember::cpu
