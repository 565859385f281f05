// Graphs of 16-bit floats. The compiler generates gemms, row kernels, column sums and
// attention for float32 and float64; in a graph of bfloat16 or float16 those ops are widened
// instead of left to the eager kernels: their inputs converted to float32 (exactly: every
// 16-bit float is a float32), the op computed in float32, its results rounded once to their
// 16-bit dtype. The eager CPU kernels compute these ops in float32 too, so the results differ
// from eager's only in summation order. The conversions are pointwise and fuse with their
// neighbours where fusion allows.
#pragma once
#include <memory>

#include "graph/graph.h"

namespace ember::compiler {

// g with its 16-bit matmuls, row ops (softmax, log_softmax, layer_norm, sum, mean) widened to
// float32; g itself when it has none. Inputs, outputs and mutations keep their dtypes.
std::shared_ptr<const graph::Graph> widen_16bit(std::shared_ptr<const graph::Graph> g);

}  // namespace ember::compiler
