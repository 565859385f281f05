// Training compile, op by op: every op-table case with a gradient (tests/ops/*_cases.cpp) runs
// eagerly and compiled with inputs that require grad; outputs and the gradients of
// sum(out_k * w_k) must agree. Backend "eager" runs the joint graphs' forward and backward
// through the eager kernels and must match bit for bit; backend "compiler" runs them as
// generated code (all cases in one compiled function, so one forward and one backward graph are
// built for the whole table) and must match within float32 rounding.
#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "autograd/node.h"
#include "capture/capture_test_util.h"
#include "compiler/compiler_test_util.h"
#include "support/op_cases.h"

namespace ember::test {
namespace {

struct Instance {
  const OpCase* c;
  Shapes shapes;
  Inputs inputs;
  std::vector<int> which;  // inputs that require grad
  std::string desc;
};

// The cases to differentiate: every case of a differentiable op, in float32 where the case runs
// it, each shape set with some element to differentiate (all of them, or only the first).
std::vector<Instance> instances(bool all_shapes) {
  std::vector<Instance> out;
  for (const OpCase& c : all_op_cases()) {
    bool differentiable = c.gradcheck, random = false;
    for (OpId op : c.covers) {
      differentiable |= op_info(op).has(kDifferentiable);
      random |= op_info(op).kind == OpKind::Random;
    }
    // Random cases reseed inside the function, which a compiled function does only while
    // tracing; dropout's training compile is tested in training_test.cpp.
    if (!differentiable || random) continue;
    const DType dtype =
        std::find(c.dtypes.begin(), c.dtypes.end(), DType::Float32) != c.dtypes.end()
            ? DType::Float32
            : c.dtypes[0];
    for (const Shapes& shapes : c.shapes) {
      Inputs in;
      if (c.make_inputs) {
        in = c.make_inputs(shapes, dtype);
      } else {
        for (const Shape& s : shapes) in.push_back(random_tensor(s, dtype));
      }
      std::vector<int> which;
      for (size_t i = 0; i < in.size(); ++i)
        if (is_floating(in[i].dtype()) &&
            (c.grad_inputs.empty() ||
             std::count(c.grad_inputs.begin(), c.grad_inputs.end(), int(i))))
          which.push_back(int(i));
      bool any = false;
      for (int i : which) any |= in[size_t(i)].numel() > 0;
      if (!any) continue;
      std::string d = c.name + " shapes=";
      for (const Shape& s : shapes) d += shape_str(s);
      out.push_back({&c, shapes, in, which, d});
      if (!all_shapes) break;
    }
  }
  return out;
}

// Fresh leaves holding the instance's inputs, the differentiated ones requiring grad.
Inputs leaves(const Instance& inst) {
  Inputs l;
  for (const Tensor& t : inst.inputs) l.push_back(t.detach().clone());
  for (int i : inst.which) l[size_t(i)].requires_grad_(true);
  return l;
}

struct Result {
  Inputs outs;
  Inputs grads;  // per differentiated input (undefined: no grad reached it)
};

// sum over differentiable outputs of (out_k * w_k).sum(), w_k uniform in [-2, 2) from `seed`.
Tensor objective(const Inputs& outs, uint64_t seed) {
  manual_seed(seed);
  Tensor total;
  for (const Tensor& o : outs) {
    if (!is_floating(o.dtype()) || !o.requires_grad()) continue;
    Tensor w = (rand(o.sizes(), DType::Float64) * 4.0 - 2.0).to(o.dtype());
    Tensor term = (o * w).sum();
    total = total.defined() ? total + term : term;
  }
  return total;
}

// How two results differ ("" when they agree). exact: bit for bit (NaN equal to NaN).
std::string compare_results(const Result& got, const Result& want, bool exact) {
  auto cmp = [&](const Tensor& g, const Tensor& w, const std::string& what) -> std::string {
    if (g.defined() != w.defined()) return what + ": defined in only one of them";
    if (!g.defined()) return "";
    if (g.sizes() != w.sizes() || g.dtype() != w.dtype())
      return what + ": metadata " + g.shape_str() + " vs " + w.shape_str();
    std::vector<double> a = g.to_vector<double>(), b = w.to_vector<double>();
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::isnan(a[i]) && std::isnan(b[i])) continue;
      bool ok = exact ? a[i] == b[i] : std::abs(a[i] - b[i]) <= 2e-5 * (1 + std::abs(b[i]));
      if (!ok) {
        std::ostringstream os;
        os.precision(9);
        os << what << " element " << i << ": compiled " << a[i] << ", eager " << b[i];
        return os.str();
      }
    }
    return "";
  };
  if (got.outs.size() != want.outs.size()) return "output count differs";
  for (size_t k = 0; k < got.outs.size(); ++k)
    if (auto d = cmp(got.outs[k], want.outs[k], "output " + std::to_string(k)); !d.empty())
      return d;
  for (size_t k = 0; k < got.grads.size(); ++k)
    if (auto d = cmp(got.grads[k], want.grads[k], "grad " + std::to_string(k)); !d.empty())
      return d;
  return "";
}

// Outputs with history got it from the compiled backward (not from per-op autograd); returned
// arguments are leaves.
bool ran_through_compiled_backward(const Inputs& outs) {
  for (const Tensor& o : outs)
    if (o.requires_grad() && !o.is_leaf() && o.grad_fn()->name() != "CompiledGraphBackward")
      return false;
  return true;
}

// Runs `fn` on fresh leaves of the instances, backward from the objective.
Result run(const std::vector<Instance>& insts,
           const std::function<Inputs(const std::vector<Inputs>&)>& fn) {
  std::vector<Inputs> ls;
  for (const Instance& inst : insts) ls.push_back(leaves(inst));
  manual_seed(7);  // random ops (dropout) draw the same values in both runs
  Result r;
  r.outs = fn(ls);
  Tensor total = objective(r.outs, 11);
  if (total.defined()) total.backward();
  for (size_t k = 0; k < insts.size(); ++k)
    for (int i : insts[k].which) r.grads.push_back(ls[k][size_t(i)].grad());
  return r;
}

Inputs run_all_cases(const std::vector<Instance>& insts, const std::vector<Inputs>& ins) {
  Inputs outs;
  for (size_t k = 0; k < insts.size(); ++k) {
    Inputs o = insts[k].c->run(ins[k]);
    outs.insert(outs.end(), o.begin(), o.end());
  }
  return outs;
}

TEST(TrainingOps, EveryDifferentiableOpHasACase) {
  std::set<OpId> covered;
  for (const Instance& inst : instances(false))
    for (OpId op : inst.c->covers) covered.insert(op);
  std::string missing;
  // Random ops are left out (their cases reseed, see instances()); the one differentiable
  // random op, dropout, is never captured (its front end keeps the composite under capture),
  // and its grad is checked by the op table's gradcheck.
  for (int i = 0; i < kNumOps; ++i)
    if (op_info(OpId(i)).has(kDifferentiable) && op_info(OpId(i)).kind != OpKind::Random &&
        !covered.count(OpId(i)))
      missing += std::string(op_name(OpId(i))) + " ";
  EXPECT_TRUE(missing.empty()) << "differentiable ops without a gradient case: " << missing;
}

TEST(TrainingOps, EagerBackendGradsEqualEagerBitForBit) {
  reset_compile_caches();
  CompileOptions opts;
  opts.backend = "eager";
  opts.fullgraph = true;
  for (const Instance& inst : instances(true)) {
    std::vector<Instance> one{inst};
    auto f = compile([c = inst.c](const std::vector<Tensor>& xs) { return c->run(xs); }, opts);
    auto compiled = [&](const std::vector<Inputs>& ins) { return f(ins[0]); };
    auto eager = [&](const std::vector<Inputs>& ins) { return inst.c->run(ins[0]); };
    try {
      Result want = run(one, eager);
      for (int call = 0; call < 2; ++call) {  // trace, then replay
        Result got = run(one, compiled);
        EXPECT_EQ(compare_results(got, want, true), "") << inst.desc << " call " << call;
        EXPECT_TRUE(ran_through_compiled_backward(got.outs)) << inst.desc;
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << inst.desc << " threw: " << e.what();
    }
  }
}

TEST(TrainingOps, CompilerBackendGradsMatchEager) {
  CacheDir dir(kSharedCompilerCache);
  reset_compile_caches();
  std::vector<Instance> insts = instances(false);
  auto all = [&](const std::vector<Inputs>& ins) { return run_all_cases(insts, ins); };
  // One argument list: every instance's inputs in a row.
  std::vector<size_t> first;
  auto f = compile(
      [&](const std::vector<Tensor>& flat) {
        std::vector<Inputs> ins;
        for (size_t k = 0; k < insts.size(); ++k)
          ins.emplace_back(flat.begin() + ptrdiff_t(first[k]),
                           flat.begin() + ptrdiff_t(first[k] + insts[k].inputs.size()));
        return run_all_cases(insts, ins);
      },
      compiler_opts());
  auto compiled = [&](const std::vector<Inputs>& ins) {
    std::vector<Tensor> flat;
    first.clear();
    for (const Inputs& in : ins) {
      first.push_back(flat.size());
      flat.insert(flat.end(), in.begin(), in.end());
    }
    return f(flat);
  };
  Result want = run(insts, all);
  for (int call = 0; call < 2; ++call) {
    Result got = run(insts, compiled);
    ASSERT_TRUE(ran_through_compiled_backward(got.outs));
    // Name the case of the first mismatching output or grad.
    size_t o = 0, g = 0;
    for (const Instance& inst : insts) {
      Result a, b;
      size_t nout = inst.c->run(leaves(inst)).size();
      a.outs.assign(got.outs.begin() + ptrdiff_t(o), got.outs.begin() + ptrdiff_t(o + nout));
      b.outs.assign(want.outs.begin() + ptrdiff_t(o), want.outs.begin() + ptrdiff_t(o + nout));
      a.grads.assign(got.grads.begin() + ptrdiff_t(g),
                     got.grads.begin() + ptrdiff_t(g + inst.which.size()));
      b.grads.assign(want.grads.begin() + ptrdiff_t(g),
                     want.grads.begin() + ptrdiff_t(g + inst.which.size()));
      EXPECT_EQ(compare_results(a, b, false), "") << inst.desc << " call " << call;
      o += nout;
      g += inst.which.size();
    }
  }
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(f.stats().breaks, 0);
}

}  // namespace
}  // namespace ember::test
