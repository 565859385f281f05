// Compiler rows: a pointwise chain run eagerly (three kernels, two temporaries) against the
// same chain compiled by the "compiler" backend into one fused loop; softmax and layer_norm
// over the last dim, eager kernels against the generated row kernels.
#include "bench.h"
#include "ember/autograd.h"
#include "ember/compile.h"
#include "ember/ember.h"

namespace ember::bench {

EMBER_BENCH(compiler) {
  std::vector<Row> rows;
  NoGradGuard no_grad;

  if (opt.wants("compiler/relu_add_mul_64M")) {
    const int64_t n = opt.quick ? (int64_t(1) << 20) : (int64_t(64) << 20);
    Tensor x = randn({n});
    auto chain = [](const Tensor& t) { return t.relu().add(scalar_tensor(1, t.dtype())).mul(
                                           scalar_tensor(2, t.dtype())); };
    CompileOptions o;
    o.backend = "compiler";
    auto f = compile(chain, o);
    f(x);  // trace and build (or load from the disk cache)
    const double eager = time_ms([&] { chain(x); }, opt.repeat);
    const double compiled = time_ms([&] { f(x); }, opt.repeat);
    Row r{"compiler/relu_add_mul_64M", eager};
    r.compiled_ms = compiled;
    // One read of x and one write of the result: the traffic a fused loop needs.
    const double bytes = 2.0 * double(n) * sizeof(float);
    r.extra = {{"gbps", bytes / (compiled * 1e-3) / 1e9}};
    r.note = opt.quick ? "quick: 1M elements" : "float32, 64M elements; gbps of the compiled run";
    rows.push_back(r);
  }

  // Row ops over a [4096, 4096] float32 tensor: the eager kernel against the compiled one.
  const int64_t side = opt.quick ? 256 : 4096;
  auto row_op = [&](const char* name, auto op) {
    if (!opt.wants(name)) return;
    Tensor x = randn({side, side});
    CompileOptions o;
    o.backend = "compiler";
    auto f = compile(op, o);
    f(x);  // trace and build (or load from the disk cache)
    const double eager = time_ms([&] { op(x); }, opt.repeat);
    const double compiled = time_ms([&] { f(x); }, opt.repeat);
    Row r{name, eager};
    r.compiled_ms = compiled;
    const double bytes = 2.0 * double(side * side) * sizeof(float);
    r.extra = {{"gbps", bytes / (compiled * 1e-3) / 1e9}};
    r.note = opt.quick ? "quick: 256x256" : "float32 4096x4096, last dim; gbps of the compiled run";
    rows.push_back(r);
  };
  row_op("compiler/softmax_4096", [](const Tensor& t) { return t.softmax(-1); });
  row_op("compiler/layer_norm_4096",
         [side](const Tensor& t) { return layer_norm(t, {side}); });
  // With a pointwise producer and consumer: eager runs four kernels and three temporaries.
  row_op("compiler/scale_softmax_scale_4096",
         [](const Tensor& t) { return (t * 2.0 + 1.0).softmax(-1) * 3.0; });
  return rows;
}

}  // namespace ember::bench
