// Shrinking a failing random program (program_gen.h): dropping outputs, steps and inputs
// while the failure holds.
#include <algorithm>

#include "support/program_gen.h"

namespace ember::testgen {

namespace {

// Keeps only the steps and inputs the outputs depend on, renumbering values.
Program dead_code_eliminate(const Program& p) {
  int ni = int(p.inputs.size()), nv = ni + int(p.steps.size());
  std::vector<bool> live(size_t(nv), false);
  for (int o : p.outputs) live[size_t(o)] = true;
  for (int v = nv - 1; v >= ni; --v)
    if (live[size_t(v)])
      for (int a : p.steps[size_t(v - ni)].args) live[size_t(a)] = true;
  Program q;
  q.seed = p.seed;
  q.backward = p.backward;
  q.sizes = p.sizes;
  std::vector<int> map(size_t(nv), -1);
  int next = 0;
  for (int v = 0; v < ni; ++v)
    if (live[size_t(v)]) {
      map[size_t(v)] = next++;
      q.inputs.push_back(p.inputs[size_t(v)]);
    }
  for (int v = ni; v < nv; ++v)
    if (live[size_t(v)]) {
      map[size_t(v)] = next++;
      Step s = p.steps[size_t(v - ni)];
      for (int& a : s.args) a = map[size_t(a)];
      q.steps.push_back(s);
    }
  for (int o : p.outputs) q.outputs.push_back(map[size_t(o)]);
  return q;
}

// Replaces every use of value `v` (a step's result) by value `by`, then drops the dead step.
Program substitute(const Program& p, int v, int by) {
  Program q = p;
  for (Step& s : q.steps)
    for (int& a : s.args)
      if (a == v) a = by;
  for (int& o : q.outputs)
    if (o == v) o = by;
  return dead_code_eliminate(q);
}

}  // namespace

Program shrink(Program p, const std::function<bool(const Program&)>& fails) {
  p = dead_code_eliminate(p);
  if (p.backward) {  // a forward that fails alone is the smaller program
    Program q = p;
    q.backward = false;
    if (fails(q)) p = q;
  }
  // One output at a time.
  if (p.outputs.size() > 1)
    for (int o : p.outputs) {
      Program q = p;
      q.outputs = {o};
      q = dead_code_eliminate(q);
      if (fails(q)) {
        p = q;
        break;
      }
    }
  // Bypass steps: a step whose operand has the same shape and dtype as its result can be
  // replaced by that operand. Repeat until nothing more can go.
  for (bool progress = true; progress;) {
    progress = false;
    // The values at each call's sizes: a bypass must fit at all of them.
    std::vector<std::vector<Tensor>> calls;
    for (size_t c = 0; c < std::max<size_t>(p.sizes.size(), 1); ++c) {
      std::vector<Tensor> probe;
      for (size_t i = 0; i < p.inputs.size(); ++i)
        probe.push_back(zeros(input_shape(p, i, c), p.inputs[i].dtype));
      calls.push_back(run_all(p, probe));
    }
    auto same_meta = [&](int a, int b) {
      for (const auto& vals : calls)
        if (vals[size_t(a)].sizes() != vals[size_t(b)].sizes() ||
            vals[size_t(a)].dtype() != vals[size_t(b)].dtype())
          return false;
      return true;
    };
    int ni = int(p.inputs.size());
    for (int i = int(p.steps.size()) - 1; i >= 0 && !progress; --i) {
      for (int a : p.steps[size_t(i)].args) {
        if (a == ni + i || !same_meta(a, ni + i)) continue;
        Program q = substitute(p, ni + i, a);
        if (q.steps.empty() || q.outputs.empty()) continue;
        if (fails(q)) {
          p = q;
          progress = true;
          break;
        }
      }
    }
  }
  return p;
}

}  // namespace ember::testgen
