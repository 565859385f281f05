// Random op chains (tests/support/program_gen) trained: floating inputs require grad (strided
// ones as slices of a leaf, so the graph's input has history of its own), and the grads of
// sum(out_k * w_k) through compile() must equal eager's: bit for bit with backend "eager",
// within rounding with backend "compiler". Programs run in batches, several in one compiled
// function (for the compiler, kProgramsPerGraph: its subset costs a few forward/backward
// compiles); a failing batch is rerun program by program, and the failing program is shrunk and
// printed with its seed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "autograd/node.h"
#include "capture/capture_test_util.h"
#include "compiler/compiler_test_util.h"
#include "support/program_gen.h"

namespace ember::test {
namespace {

using testgen::Program;

constexpr uint64_t kEagerPrograms = 300;
constexpr uint64_t kCompilerPrograms = 40;
constexpr size_t kProgramsPerGraph = 20;
constexpr size_t kEagerProgramsPerGraph = 10;

// EMBER_TRAINING_PROGRAMS=N runs N programs against "eager" and N * 2 / 15 against
// "compiler" (the CI ratio), for longer hunts outside CI (3000 / 400 pass).
uint64_t program_count(uint64_t ci_default, bool compiler) {
  const char* n = std::getenv("EMBER_TRAINING_PROGRAMS");
  if (!n || std::atoll(n) <= 0) return ci_default;
  return compiler ? uint64_t(std::atoll(n)) * 2 / 15 : uint64_t(std::atoll(n));
}

int64_t grads_checked = 0;  // leaves that got a gradient in the eager runs

// A program's inputs for a training run: `leaves` get the grads, `inputs` go to the program.
struct TrainInputs {
  std::vector<Tensor> leaves, inputs;
};

TrainInputs train_inputs(const Program& p) {
  TrainInputs t;
  std::vector<Tensor> data = testgen::make_inputs(p, p.seed);
  for (size_t i = 0; i < data.size(); ++i) {
    const Tensor& d = data[i];
    if (!is_floating(d.dtype())) {
      t.leaves.push_back(Tensor());
      t.inputs.push_back(d);
    } else if (d.is_contiguous() || d.dim() == 0) {
      t.leaves.push_back(d.detach().clone().requires_grad_(true));
      t.inputs.push_back(t.leaves.back());
    } else {
      // As make_inputs lays it out: every other element of a twice-as-wide tensor.
      Shape wide = d.sizes();
      const int64_t last = int64_t(wide.size()) - 1;
      wide.back() *= 2;
      Tensor base = zeros(wide, TensorOptions(d.dtype()));
      base.slice(last, 1, wide.back(), 2).copy_(d);
      base.requires_grad_(true);
      t.leaves.push_back(base);
      t.inputs.push_back(base.slice(last, 1, wide.back(), 2));
    }
  }
  return t;
}

// Every program's outputs and the grads of every leaf, from one backward over all of them.
struct Result {
  std::vector<Tensor> outs, grads;
};

using Runner = std::function<std::vector<Tensor>(const std::vector<std::vector<Tensor>>&)>;

Result train(const std::vector<Program>& ps, const Runner& run) {
  std::vector<TrainInputs> ins;
  std::vector<std::vector<Tensor>> args;
  for (const Program& p : ps) {
    ins.push_back(train_inputs(p));
    args.push_back(ins.back().inputs);
  }
  Result r;
  r.outs = run(args);
  manual_seed(17);
  Tensor total;
  for (const Tensor& o : r.outs) {
    if (!o.requires_grad()) continue;
    Tensor w = rand(o.sizes(), DType::Float64) * 4.0 - 2.0;
    Tensor term = (o.to(DType::Float64) * w).sum();
    total = total.defined() ? total + term : term;
  }
  if (total.defined()) total.backward();
  for (const TrainInputs& t : ins)
    for (const Tensor& l : t.leaves) r.grads.push_back(l.defined() ? l.grad() : Tensor());
  return r;
}

std::vector<Tensor> run_programs(const std::vector<Program>& ps,
                                 const std::vector<std::vector<Tensor>>& args) {
  std::vector<Tensor> outs;
  for (size_t k = 0; k < ps.size(); ++k) {
    std::vector<Tensor> o = testgen::run_program(ps[k], args[k]);
    outs.insert(outs.end(), o.begin(), o.end());
  }
  return outs;
}

// Empty when compiled and eager agree. Tolerance: float32 rounding grows with the values, so it
// is relative to the largest magnitude in the tensor.
std::string compare(const Tensor& got, const Tensor& want, bool exact, const std::string& what) {
  if (got.defined() != want.defined()) return what + ": defined in only one run";
  if (!got.defined()) return "";
  if (got.sizes() != want.sizes() || got.dtype() != want.dtype())
    return what + ": metadata " + got.shape_str() + " vs " + want.shape_str();
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double scale = 1;
  for (double v : w)
    if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i]) && std::isnan(w[i])) continue;
    bool ok = exact ? g[i] == w[i] : std::abs(g[i] - w[i]) <= 1e-4 * std::abs(w[i]) + 1e-5 * scale;
    if (!ok) {
      std::ostringstream os;
      os.precision(17);
      os << what << " element " << i << ": compiled " << g[i] << ", eager " << w[i];
      return os.str();
    }
  }
  return "";
}

// Runs the programs eagerly and through one compiled function; "" when they agree.
std::string check(const std::vector<Program>& ps, const std::string& backend) {
  try {
    Result want = train(ps, [&](const auto& args) { return run_programs(ps, args); });
    for (const Tensor& g : want.grads) grads_checked += g.defined();
    CompileOptions o;
    o.backend = backend;
    o.fullgraph = true;
    std::vector<size_t> first;
    std::vector<bool> passthrough;  // per output: an argument returned as it is
    auto f = compile(
        [&](const std::vector<Tensor>& flat) {
          std::vector<std::vector<Tensor>> args;
          for (size_t k = 0; k < ps.size(); ++k)
            args.emplace_back(flat.begin() + ptrdiff_t(first[k]),
                              flat.begin() + ptrdiff_t(first[k] + ps[k].inputs.size()));
          return run_programs(ps, args);
        },
        o);
    for (int call = 0; call < 2; ++call) {  // trace, then replay
      Result got = train(ps, [&](const std::vector<std::vector<Tensor>>& args) {
        std::vector<Tensor> flat;
        first.clear();
        for (const auto& a : args) {
          first.push_back(flat.size());
          flat.insert(flat.end(), a.begin(), a.end());
        }
        std::vector<Tensor> outs = f(flat);
        passthrough.clear();
        for (const Tensor& o : outs) {
          bool same = false;
          for (const Tensor& a : flat) same |= o.impl() == a.impl();
          passthrough.push_back(same);
        }
        return outs;
      });
      const std::string when = call ? "replay, " : "first call, ";
      if (got.outs.size() != want.outs.size()) return when + "output count differs";
      for (size_t i = 0; i < got.outs.size(); ++i) {
        if (got.outs[i].requires_grad() != want.outs[i].requires_grad())
          return when + "output " + std::to_string(i) + ": requires_grad differs";
        if (got.outs[i].requires_grad() && !got.outs[i].is_leaf() && !passthrough[i] &&
            got.outs[i].grad_fn()->name() != "CompiledGraphBackward")
          return when + "output " + std::to_string(i) + ": history from " +
                 got.outs[i].grad_fn()->name() + ", not from the compiled backward";
        std::string d = compare(got.outs[i], want.outs[i], backend == "eager",
                                when + "output " + std::to_string(i));
        if (!d.empty()) return d;
      }
      // An input returned as it is gets grads both from inside the graph (summed there, by the
      // compiled backward) and from outside it; eager sums all of them in one order, so the
      // total can differ in the last bit. Otherwise backend eager is exact.
      bool exact = backend == "eager";
      for (size_t i = 0; i < got.outs.size(); ++i)
        exact &= !(passthrough[i] && got.outs[i].requires_grad());
      for (size_t i = 0; i < got.grads.size(); ++i) {
        std::string d = compare(got.grads[i], want.grads[i], exact,
                                when + "grad of input " + std::to_string(i));
        if (!d.empty()) return d;
      }
    }
  } catch (const std::exception& e) {
    return std::string("threw: ") + e.what();
  }
  return "";
}

void check_programs(const std::string& backend, uint64_t count, size_t per_graph) {
  std::vector<Program> batch;
  auto flush = [&] {
    if (batch.empty()) return;
    if (!check(batch, backend).empty()) {
      for (const Program& p : batch) {
        std::string diff = check({p}, backend);
        if (diff.empty()) continue;
        Program small =
            testgen::shrink(p, [&](const Program& q) { return !check({q}, backend).empty(); });
        ADD_FAILURE() << "training through backend \"" << backend << "\" differs from eager (seed "
                      << p.seed << "): " << check({small}, backend)
                      << "\nminimal failing program:\n"
                      << testgen::to_string(small) << "original program (" << diff << "):\n"
                      << testgen::to_string(p);
      }
    }
    batch.clear();
  };
  for (uint64_t seed = 1; seed <= count; ++seed) {
    batch.push_back(testgen::generate_program(seed));
    if (batch.size() == per_graph) flush();
  }
  flush();
}

TEST(TrainingPrograms, EagerBackendGradsEqualEagerBitForBit) {
  reset_compile_caches();
  grads_checked = 0;
  const uint64_t n = program_count(kEagerPrograms, false);
  check_programs("eager", n, kEagerProgramsPerGraph);
  EXPECT_GT(grads_checked, int64_t(n));  // most programs have a differentiable path
}

TEST(TrainingPrograms, CompilerBackendGradsMatchEager) {
  CacheDir dir(kSharedCompilerCache);
  reset_compile_caches();
  check_programs("compiler", program_count(kCompilerPrograms, true), kProgramsPerGraph);
}

}  // namespace
}  // namespace ember::test
