// Compiler rows: a pointwise chain run eagerly (three kernels, two temporaries) against the
// same chain compiled by the "compiler" backend into one fused loop; softmax and layer_norm
// over the last dim, eager kernels against the generated row kernels; a linear layer with its
// gelu, OpenBLAS and two kernels against ember's gemm with both as its epilogue.
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
    const auto [eager, compiled] =
        time_pair_ms([&] { chain(x); }, [&] { f(x); }, opt.repeat);
    Row r{"compiler/relu_add_mul_64M", eager};
    r.compiled_ms = compiled;
    // One read of x and one write of the result: the traffic a fused loop needs.
    const double bytes = 2.0 * double(n) * sizeof(float);
    const double gbps = bytes / (compiled * 1e-3) / 1e9;
    const double copy = memcpy_gbps(size_t(n) * sizeof(float), opt.repeat);
    r.extra = {{"gbps", gbps}, {"memcpy_gbps", copy}, {"fraction_of_memcpy", gbps / copy}};
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
    const auto [eager, compiled] =
        time_pair_ms([&] { op(x); }, [&] { f(x); }, opt.repeat);
    Row r{name, eager};
    r.compiled_ms = compiled;
    const double bytes = 2.0 * double(side * side) * sizeof(float);
    // The floor for any kernel that reads x and writes a result of its size: the compiled
    // x * 2, one streaming pass over the same bytes, timed against the eager op in interleaved
    // rounds. ceiling is the speedup over eager of a kernel that ran as fast as that pass.
    auto scale = compile([](const Tensor& t) { return t * 2.0; }, o);
    scale(x);
    const auto [eager_again, copy] = time_pair_ms([&] { op(x); }, [&] { scale(x); }, opt.repeat);
    r.extra = {{"gbps", bytes / (compiled * 1e-3) / 1e9},
               {"pass_ms", copy},
               {"ceiling", eager_again / copy}};
    r.note = opt.quick ? "quick: 256x256"
                       : "float32 4096x4096, last dim; gbps of the compiled run; ceiling: eager "
                         "over one compiled pass x * 2";
    rows.push_back(r);
  };
  row_op("compiler/softmax_4096", [](const Tensor& t) { return t.softmax(-1); });
  row_op("compiler/layer_norm_4096",
         [side](const Tensor& t) { return layer_norm(t, {side}); });
  // With a pointwise producer and consumer: eager runs four kernels and three temporaries.
  row_op("compiler/scale_softmax_scale_4096",
         [](const Tensor& t) { return (t * 2.0 + 1.0).softmax(-1) * 3.0; });

  // Causal attention as the GPT's 384 config runs it: q, k, v heads viewed out of one
  // [B, T, 3C] projection. Eager: two batched gemms, scale, mask, softmax, four temporaries.
  if (opt.wants("compiler/causal_attention_384")) {
    const int64_t B = opt.quick ? 2 : 8, T = opt.quick ? 64 : 256, nh = 6, hs = 64;
    Tensor qkv = randn({B, T, 3 * nh * hs});
    auto attn = [B, T](const Tensor& x) {
      std::vector<Tensor> p = x.split(nh * hs, 2);
      auto heads = [&](const Tensor& t) { return t.view({B, T, nh, hs}).transpose(1, 2); };
      return scaled_dot_product_attention(heads(p[0]), heads(p[1]), heads(p[2]), true);
    };
    auto f = compile(attn);
    f(qkv);
    const auto [eager, compiled] =
        time_pair_ms([&] { attn(qkv); }, [&] { f(qkv); }, opt.repeat);
    Row r{"compiler/causal_attention_384", eager};
    r.compiled_ms = compiled;
    // Multiply-adds of the unmasked half: scores and probs @ v.
    const double flops = 2.0 * 2.0 * double(B * nh) * double(T) * double(T + 1) / 2 * hs;
    r.extra = {{"compiled_gflops", flops / (compiled * 1e-3) / 1e9}};
    r.note = opt.quick ? "quick: B 2, T 64" : "B 8, 6 heads of 64, T 256, causal; float32";
    rows.push_back(r);
  }
  // A GPT MLP's first linear layer and its gelu: eager runs OpenBLAS, then the bias add and
  // the gelu as two more kernels; compiled runs ember's gemm with both as its epilogue.
  // matmul_ms is the eager (OpenBLAS) product alone, timed after the pair.
  for (const bool big : {false, true}) {
    const std::string name = big ? "compiler/linear_gelu_384" : "compiler/linear_gelu_baby";
    if (!opt.wants(name)) continue;
    const int64_t rows_n = opt.quick ? 64 : (big ? 2048 : 768), in = big ? 384 : 128;
    const int64_t out = 4 * in;
    Tensor x = randn({rows_n, in}), w = randn({out, in}) * 0.05, b = randn({out}) * 0.05;
    auto layer = [](const Tensor& t, const Tensor& wt, const Tensor& bias) {
      return (t.matmul(wt.t()) + bias).gelu();
    };
    auto f = compile(layer);
    f(x, w, b);
    const auto [eager, compiled] =
        time_pair_ms([&] { layer(x, w, b); }, [&] { f(x, w, b); }, opt.repeat);
    const double matmul = time_ms([&] { x.matmul(w.t()); }, opt.repeat);
    Row r{name, eager};
    r.compiled_ms = compiled;
    const double flops = 2.0 * double(rows_n) * double(in) * double(out);
    r.extra = {{"matmul_ms", matmul},
               {"compiled_gflops", flops / (compiled * 1e-3) / 1e9},
               {"matmul_gflops", flops / (matmul * 1e-3) / 1e9}};
    r.note = "gelu(x @ w^T + b), x [" + std::to_string(rows_n) + ", " + std::to_string(in) +
             "], w [" + std::to_string(out) + ", " + std::to_string(in) + "]; float32";
    rows.push_back(r);
  }
  return rows;
}

}  // namespace ember::bench
