// The network-layer steps of random programs (Op::Layer, program_gen.h): convolutions, pooling,
// channel norms, resizing, gating, masks and sorting over image-like values, with the inputs
// they take (an image-like one, conv weights and per-channel vectors as parameters).
// Only the programs of kLayerSeeds on draw them.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "support/program_gen.h"
#include "support/program_rng.h"

namespace ember::testgen {

// A layer program's base shape: [N, C, H, W], or [N, C, L] in one in three.
Shape layer_base(Rng& r);
// A layer program's parameters, after its other inputs (input 0 is the base, of dtype `dtype`;
// the generator moves it last afterwards):
// a dense and a depthwise conv weight for the base's channels, their range such that a
// convolution stays near its operand's size, and two [C] vectors.
void add_layer_inputs(Rng& r, Program& p, const Shape& base, DType dtype);
// A layer step over values `vals` whose operands fit it; false when none does (the caller
// draws again). The operand is preferably one of the last values.
bool draw_layer_step(Rng& r, const std::vector<Tensor>& vals, Step& s);
// The step applied to the values so far.
Tensor apply_layer_step(const Step& s, const std::vector<Tensor>& vals);
// A bound on |result| from the bounds of the values (`bounds`, one per value of `vals`).
double layer_bound(const Step& s, const std::vector<double>& bounds,
                   const std::vector<Tensor>& vals);
// The step as a C++ expression, values named by `name`.
std::string layer_cpp(const Step& s, const std::function<std::string(int)>& name);

}  // namespace ember::testgen
