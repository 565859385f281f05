// Choosing pairs of independent matmuls (gemm_pairs.h).
#include "compiler/gemm_pairs.h"

#include <algorithm>

#include "ops/op.h"

namespace ember::compiler {

namespace {

// How far past the first matmul the second is looked for.
constexpr size_t kWindow = 8;

bool reads_any(const graph::Node& n, const std::vector<const graph::Value*>& vals) {
  for (const graph::Value* v : n.inputs)
    if (std::find(vals.begin(), vals.end(), v) != vals.end()) return true;
  return false;
}

}  // namespace

bool pairable_matmul(const graph::Node& n) {
  if (n.op != OpId::matmul || n.outputs.size() != 1) return false;
  const graph::Value& o = *n.outputs[0];
  if ((o.meta.dtype != DType::Float32 && o.meta.dtype != DType::Float64) || o.device != kCPU)
    return false;
  for (const graph::Value* v : n.inputs)
    if (v->meta.dtype != o.meta.dtype || v->device != kCPU) return false;
  return true;
}

std::vector<int> plan_gemm_pairs(const std::vector<const graph::Node*>& steps) {
  std::vector<int> pair(steps.size(), -1);
  for (size_t s = 0; s < steps.size(); ++s) {
    if (pair[s] >= 0 || !steps[s] || !pairable_matmul(*steps[s])) continue;
    // The first matmul's results (a view of them in between ends the search).
    std::vector<const graph::Value*> tainted(steps[s]->outputs.begin(), steps[s]->outputs.end());
    for (size_t t = s + 1; t < steps.size() && t <= s + kWindow; ++t) {
      const graph::Node* n = steps[t];
      if (!n) break;  // a generated kernel: stop looking
      if (pairable_matmul(*n)) {  // the next matmul: never paired yet (pairs form forward)
        if (!reads_any(*n, tainted)) {
          pair[s] = int(t);
          pair[t] = int(s);
        }
        break;
      }
      // A view in between runs before the pair: it must not need the first's result.
      if (op_info(n->op).kind != OpKind::View || reads_any(*n, tainted)) break;
    }
  }
  return pair;
}

}  // namespace ember::compiler
