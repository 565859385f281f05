// CPU kernels of the random ops (stream layout: ops/defs/factory.def, core/philox.h).
#pragma once
#include "ops/op_impl.h"

namespace ember::cpu {

void rand(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void randn(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void randint(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void bernoulli(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void rng_state(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void dropout_rng(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void dropout(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void multinomial(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);

}  // namespace ember::cpu
