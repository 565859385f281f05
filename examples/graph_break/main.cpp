// A custom module whose forward reads a value back to the host (item()) to pick a branch:
// ember::compile cannot keep that in one graph, so it breaks the graph there, runs the read
// eagerly and resumes in a second graph. ember::explain shows both graphs and the break with
// its file:line and a hint; the fix (the branch as a tensor op, `where`) gives one graph.
#include <cstdio>
#include <iostream>
#include <memory>

#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/nn.h"

using namespace ember;

// A linear layer whose output is rescaled when it grows too large.
class ClampedLinear : public nn::Module {
 public:
  ClampedLinear(int64_t in, int64_t out, bool data_dependent_branch)
      : nn::Module("ClampedLinear"), branch_(data_dependent_branch) {
    fc = register_module("fc", std::make_shared<nn::Linear>(in, out));
  }
  Tensor forward(const Tensor& x) const {
    Tensor y = fc->forward(x);
    Tensor peak = y.abs().amax();
    if (branch_) {
      if (peak.item() > 1.0) y = y / peak;  // reads a value of the graph: a break
      return y.tanh();
    }
    return y.where(peak.le(1.0), y / peak).tanh();  // the same, as tensor ops: no break
  }
  std::shared_ptr<nn::Linear> fc;

 private:
  bool branch_;
};

int main() {
  manual_seed(0);
  Tensor x = randn({4, 16}) * 3.0;
  auto with_break = std::make_shared<ClampedLinear>(16, 8, true);
  auto without = std::make_shared<ClampedLinear>(16, 8, false);
  without->load_state_dict(with_break->state_dict());

  ExplainReport r1 = explain([&](const Tensor& t) { return with_break->forward(t); }, x);
  std::cout << "--- with item():\n" << r1 << "\n";
  ExplainReport r2 = explain([&](const Tensor& t) { return without->forward(t); }, x);
  std::cout << "--- with where():\n" << r2 << "\n";

  // Compiled, both compute what the module computes eagerly.
  auto compiled = compile(with_break);
  Tensor diff = (compiled(x) - without->forward(x)).abs().amax();
  std::printf("graphs: %lld with the break, %lld without; max difference %.2e\n",
              (long long)r1.graph_count, (long long)r2.graph_count, diff.item());
  bool ok = r1.breaks.size() == 1 && r2.breaks.empty() && diff.item() < 1e-5;
  return ok ? 0 : 1;
}
