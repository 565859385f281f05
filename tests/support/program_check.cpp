// Checking random programs against eager execution (program_check.h): the tolerances, which
// follow the values' dtypes and bounds, and the eager results a compiled call must match.
#include "support/program_check.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "ember/autograd.h"
#include "ember/compile.h"

namespace ember::testgen {
namespace {

// Empty when `got` matches `want`; else what differs. exact: bit-identical values.
std::string compare(const Tensor& got, const Tensor& want, bool exact, double rtol, double atol) {
  std::ostringstream os;
  if (got.sizes() != want.sizes() || got.dtype() != want.dtype()) {
    os << "metadata: got " << dtype_name(got.dtype()) << got.shape_str() << ", want "
       << dtype_name(want.dtype()) << want.shape_str();
    return os.str();
  }
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok = exact ? (g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i])))
                    : g[i] == w[i] || std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i]);
    if (!ok) {
      os.precision(17);
      os << "element " << i << ": got " << g[i] << ", want " << w[i];
      return os.str();
    }
  }
  return {};
}

// Which values of p carry float32 rounding: float32 themselves, or computed from one (a
// float64 result of float32 work is only as precise as float32).
std::vector<bool> float32_values(const Program& p, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> all = run_all(p, inputs);
  std::vector<bool> f32(all.size());
  for (size_t v = 0; v < all.size(); ++v) {
    f32[v] = all[v].dtype() == DType::Float32;
    if (v >= p.inputs.size())
      for (int a : p.steps[v - p.inputs.size()].args) f32[v] = f32[v] || f32[size_t(a)];
  }
  return f32;
}

// The largest bound on a value that value v is computed from (v included): rounding errors are
// relative to the values they happen in, and ops that shrink values (tanh, softmax) do not
// shrink the absolute errors they are handed.
double error_scale(const Program& p, int v) {
  double b = value_bound(p, v);
  if (size_t(v) >= p.inputs.size())
    for (int a : p.steps[size_t(v) - p.inputs.size()].args) b = std::max(b, error_scale(p, a));
  return b;
}

// Compares output i of p; exact for the eager backend and for non-float outputs.
std::string compare_output(const Program& p, size_t i, const std::vector<bool>& f32,
                           const Tensor& got, const Tensor& want, bool eager_backend) {
  bool exact = eager_backend || !is_floating(want.dtype());
  // Rounding differences scale with the magnitude of the values involved.
  bool single = f32[size_t(p.outputs[i])];
  double scale = std::max(1.0, error_scale(p, p.outputs[i]));
  double rtol = single ? 1e-5 : 1e-12, atol = (single ? 1e-6 : 1e-12) * scale;
  return compare(got, want, exact, rtol, atol);
}

// A training program's loss sum((out * w).sum()): its rounding scales with the outputs' bounds
// times their sizes (the weights are at most 1).
std::string compare_loss(const Program& p, const std::vector<bool>& f32,
                         const std::vector<Tensor>& outs, const Tensor& got, const Tensor& want,
                         bool eager_backend) {
  bool single = false;
  double scale = 1;
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    if (!is_floating(outs[i].dtype())) continue;
    single |= f32[size_t(p.outputs[i])];
    scale += error_scale(p, p.outputs[i]) * double(outs[i].numel());
  }
  return compare(got, want, eager_backend, single ? 1e-5 : 1e-12, (single ? 1e-6 : 1e-12) * scale);
}

// Compares the grads of a training program's leaves: relative to the largest grad of each (the
// grads of fused and eager backward graphs sum in other orders).
std::string compare_grads(const std::vector<bool>& f32, const std::vector<Tensor>& got,
                          const std::vector<Tensor>& want, bool eager_backend) {
  const bool single = std::find(f32.begin(), f32.end(), true) != f32.end();
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i].defined() != want[i].defined())
      return "grad of input " + std::to_string(i) + (want[i].defined() ? " missing" : " extra");
    if (!want[i].defined()) continue;
    double scale = 1;
    for (double g : want[i].to_vector<double>()) scale = std::max(scale, std::abs(g));
    std::string d = compare(got[i], want[i], eager_backend, single ? 1e-4 : 1e-10,
                            (single ? 1e-5 : 1e-11) * scale);
    if (!d.empty()) return "grad of input " + std::to_string(i) + ": " + d;
  }
  return {};
}

}  // namespace

Expected expected(const Program& p, size_t at) {
  Expected e;
  e.inputs = make_inputs(p, p.seed, at);
  e.f32 = float32_values(p, e.inputs);
  if (!p.backward) {
    e.outputs = run_program(p, e.inputs);
    return e;
  }
  e.weights = loss_weights(run_program(p, e.inputs), p.seed);
  TrainingArgs t = training_args(p, p.seed, e.weights, at);
  std::vector<Tensor> outs = run_training(p, t.args);
  e.loss = outs.back();
  outs.pop_back();
  if (e.loss.requires_grad()) e.loss.backward();
  e.grads = leaf_grads(t.leaves);
  for (const Tensor& o : outs) e.outputs.push_back(o.detach());
  e.loss = e.loss.detach();
  return e;
}

Call call_args(const Program& p, const Expected& e, size_t at) {
  if (!p.backward) return {e.inputs, {}};
  TrainingArgs t = training_args(p, p.seed, e.weights, at);
  return {t.args, t.leaves};
}
std::vector<Tensor> run_part(const Program& p, const std::vector<Tensor>& args) {
  return p.backward ? run_training(p, args) : run_program(p, args);
}

std::string check_results(const Program& p, const Expected& e, const Call& c,
                          const std::vector<Tensor>& got, bool eager_backend) {
  if (got.size() != e.outputs.size() + (p.backward ? 1 : 0)) return "output count differs";
  for (size_t i = 0; i < e.outputs.size(); ++i) {
    std::string d = compare_output(p, i, e.f32, got[i].detach(), e.outputs[i], eager_backend);
    if (!d.empty()) return "output " + std::to_string(i) + ": " + d;
  }
  if (!p.backward) return {};
  std::string d = compare_loss(p, e.f32, e.outputs, got.back().detach(), e.loss, eager_backend);
  if (!d.empty()) return "loss: " + d;
  return compare_grads(e.f32, leaf_grads(c.leaves), e.grads, eager_backend);
}

ProgramsFn batch_function(const std::vector<Program>& ps, const std::vector<Expected>& es) {
  std::vector<size_t> nargs;  // each program's inputs, then a training program's weights
  for (size_t j = 0; j < ps.size(); ++j) nargs.push_back(ps[j].inputs.size() + es[j].weights.size());
  return [ps, nargs](const std::vector<Tensor>& xs) {
    std::vector<Tensor> outs;
    size_t at = 0;
    for (size_t j = 0; j < ps.size(); ++j) {
      std::vector<Tensor> in(xs.begin() + long(at), xs.begin() + long(at + nargs[j]));
      at += nargs[j];
      std::vector<Tensor> o = run_part(ps[j], in);
      outs.insert(outs.end(), o.begin(), o.end());
    }
    return outs;
  };
}

std::string call_and_check(const ProgramsFn& f, const std::vector<Program>& ps,
                           const std::vector<Expected>& es, size_t at, bool eager_backend) {
  std::vector<Call> calls;
  std::vector<Tensor> flat;
  for (size_t j = 0; j < ps.size(); ++j) {
    calls.push_back(call_args(ps[j], es[j], at));
    flat.insert(flat.end(), calls.back().args.begin(), calls.back().args.end());
  }
  std::vector<Tensor> got = f(flat);
  std::vector<Tensor> losses;
  std::vector<std::vector<Tensor>> parts;
  size_t k = 0;
  for (size_t j = 0; j < ps.size(); ++j) {
    const size_t m = es[j].outputs.size() + (ps[j].backward ? 1 : 0);
    if (k + m > got.size()) return "output count differs";
    parts.emplace_back(got.begin() + long(k), got.begin() + long(k + m));
    k += m;
    if (ps[j].backward && parts.back().back().requires_grad()) losses.push_back(parts.back().back());
  }
  if (!losses.empty()) backward(losses);
  for (size_t j = 0; j < ps.size(); ++j) {
    std::string d = check_results(ps[j], es[j], calls[j], parts[j], eager_backend);
    if (!d.empty()) return std::string("seed ").append(std::to_string(ps[j].seed)).append(", ") + d;
  }
  return {};
}

std::string check_programs_through(const std::string& backend, uint64_t first, uint64_t count) {
  std::vector<Program> ps;
  std::vector<Expected> es;
  for (uint64_t seed = first; seed < first + count; ++seed) {
    ps.push_back(generate_program(seed));
    es.push_back(expected(ps.back()));
  }
  CompileOptions opts;
  opts.backend = backend;
  auto f = ember::compile(batch_function(ps, es), opts);
  const ProgramsFn call = [&f](const std::vector<Tensor>& xs) { return f(xs); };
  return call_and_check(call, ps, es, 0, true);
}

}  // namespace ember::testgen
