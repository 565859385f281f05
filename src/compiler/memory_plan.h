// Peak memory of a graph's intermediates, as run by a list of steps: each step materializes
// the values it produces (a view shares its base's buffer), and a buffer is released after
// the last step that reads it or any view of it. Graph outputs live to the end; graph inputs
// are not counted (they exist either way). Compiled graphs report their plan against the same
// simulation of eager execution (one step per node).
#pragma once
#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace ember::compiler {

struct StepIO {
  std::vector<const graph::Value*> produces;
  std::vector<const graph::Value*> reads;
};

// Peak bytes of buffers alive at once over `steps` (run in order).
int64_t peak_bytes(const graph::Graph& g, const std::vector<StepIO>& steps);

// The same for eager execution: every node a step.
int64_t eager_peak_bytes(const graph::Graph& g);

}  // namespace ember::compiler
