// vecmath/...: the transcendental pointwise ops (and gelu's backward kernel) and the row-wise
// kernels built on exp/log, over one [4096, 4096] float32 tensor (1024 x 1024 with --quick).
// Reports ns per element; run with OMP_NUM_THREADS=1 for single-core numbers.
#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "dispatch/dispatcher.h"
#include "ember/autograd.h"
#include "ember/ops.h"

namespace ember::bench {

EMBER_BENCH(vecmath) {
  NoGradGuard no_grad;
  const int64_t n = opt.quick ? 1024 : 4096;
  // Activations around the typical range (normal, sd 4), positive values for log, targets.
  std::mt19937 gen(0);
  std::normal_distribution<float> normal(0.f, 4.f);
  std::uniform_real_distribution<float> uniform(1e-3f, 100.f);
  std::vector<float> xs(size_t(n * n)), ps(size_t(n * n));
  for (auto& v : xs) v = normal(gen);
  for (auto& v : ps) v = uniform(gen);
  std::vector<int64_t> ts(static_cast<size_t>(n));
  for (auto& v : ts) v = int64_t(gen() % uint32_t(n));
  const Tensor x = from_vector(xs, {n, n});
  const Tensor pos = from_vector(ps, {n, n});
  const Tensor targets = from_vector(ts, {n}, DType::Int64);
  Attrs exact_gelu;  // gelu_backward's flag picks the tanh form
  exact_gelu.flag = false;
  const std::vector<std::pair<std::string, std::function<Tensor()>>> cases = {
      {"exp", [&] { return x.exp(); }},
      {"log", [&] { return pos.log(); }},
      {"tanh", [&] { return x.tanh(); }},
      {"sigmoid", [&] { return x.sigmoid(); }},
      {"silu", [&] { return x.silu(); }},
      {"gelu", [&] { return x.gelu(); }},
      {"gelu_tanh", [&] { return x.gelu(true); }},
      // grad * gelu'(x), the kernel of gelu's backward (pos stands in for the incoming grad).
      {"gelu_backward", [&] { return dispatch1(OpId::gelu_backward, {pos, x}, exact_gelu); }},
      {"softmax", [&] { return x.softmax(-1); }},
      {"log_softmax", [&] { return x.log_softmax(-1); }},
      {"logsumexp", [&] { return x.logsumexp({-1}); }},
      {"cross_entropy", [&] { return cross_entropy(x, targets); }},
  };
  std::vector<Row> rows;
  for (auto& [name, f] : cases) {
    Row r;
    r.name = "vecmath/" + name;
    if (!opt.wants(r.name)) continue;
    r.eager_ms = time_ms([&] { f(); }, opt.repeat);
    r.extra.push_back({"ns_per_elem", r.eager_ms * 1e6 / double(n * n)});
    rows.push_back(r);
  }
  return rows;
}

}  // namespace ember::bench
