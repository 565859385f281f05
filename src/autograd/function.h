// Recording op calls on the autograd tape.
#pragma once
#include <vector>

#include "ops/op_impl.h"

namespace ember::autograd {

// True when grad mode is on, the op is differentiable and some input requires grad.
// Throws for ops flagged kNoGrad whose inputs require grad.
bool needs_history(OpId op, const std::vector<Tensor>& inputs);
// Runs the op below autograd and attaches an OpNode to its floating outputs.
std::vector<Tensor> record(OpId op, const std::vector<Tensor>& inputs, const Attrs& attrs);
// A plain alias of t's data (same storage, so version checks still apply) without autograd
// history: saving a node's own output this way avoids a cycle output -> node -> saved output.
Tensor alias_without_history(const Tensor& t);
// In-place form: computes out of place with history, writes into self, moves the history.
void record_inplace(OpId op, const Tensor& self, const std::vector<Tensor>& inputs,
                    const Attrs& attrs);

}  // namespace ember::autograd
