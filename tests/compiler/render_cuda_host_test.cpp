// The CUDA renderer's elementwise kernels run on the host: their grid-stride loops are plain
// C++ once the few CUDA words are defined (a block after a block, a thread after a thread), so
// the system compiler builds the rendered source and the test calls each kernel for every
// (block, thread) of its launch, against the graph's eager result: hand-made graphs for the
// vector loop's coordinates and masked loads, and every elementwise kernel of random programs.
// This checks the index math, vector loops and masked loads without a GPU;
// tests/cuda/cuda_compile_test.cpp runs the same code on one.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "capture/capture.h"
#include "compiler/graph_run.h"
#include "compiler/lower.h"
#include "compiler/pointwise_fusion.h"
#include "compiler/render_cuda.h"
#include "ember/compile.h"
#include "ember/ember.h"
#include "support/program_check.h"
#include "support/program_gen.h"
#include "support/run_command.h"

namespace ember::compiler {
namespace {

// What the kernels use of CUDA, for a host compiler: launch indices as globals the test sets.
constexpr const char* kHostCuda = R"(#include <cstdint>
#include <cstring>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
struct ember_dim3 { unsigned x = 1, y = 1, z = 1; };
extern "C" { ember_dim3 blockIdx, threadIdx, blockDim, gridDim; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
template <class T> T __shfl_xor_sync(unsigned, T v, int) { return v; }
inline void __syncthreads() {}
)";

struct Dim3 {
  unsigned x, y, z;
};

// A host build of `src` (the CUDA renderer's translation unit), loaded.
class HostModule {
 public:
  explicit HostModule(const std::string& src) {
    dir_ = std::filesystem::temp_directory_path() /
           ("ember-cuda-host-" + std::to_string(::getpid()) + "-" + std::to_string(next_++));
    std::filesystem::create_directories(dir_);
    const std::string cpp = (dir_ / "k.cpp").string(), so = (dir_ / "k.so").string();
    std::ofstream(cpp) << kHostCuda << src;
    const test::CommandResult r = test::run_command("c++ -std=c++20 -O1 -shared -fPIC -I " +
                                        std::string(EMBER_SOURCE_DIR) + "/src -o " + so + " " +
                                        cpp + " 2>&1");
    EXPECT_EQ(r.status, 0) << r.output;
    lib_ = r.status == 0 ? dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL) : nullptr;
  }
  ~HostModule() {
    if (lib_) dlclose(lib_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  bool ok() const { return lib_ != nullptr; }
  // Runs kernel `name` over grid x block with `args` (buffers and sizes, 8 bytes each).
  void launch(const std::string& name, unsigned grid, unsigned block,
              const std::vector<uint64_t>& a) const {
    void* fn = dlsym(lib_, name.c_str());
    ASSERT_NE(fn, nullptr) << name;
    auto* bi = static_cast<Dim3*>(dlsym(lib_, "blockIdx"));
    auto* ti = static_cast<Dim3*>(dlsym(lib_, "threadIdx"));
    auto* bd = static_cast<Dim3*>(dlsym(lib_, "blockDim"));
    auto* gd = static_cast<Dim3*>(dlsym(lib_, "gridDim"));
    bd->x = block;
    gd->x = grid;
    using F = void (*)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                       uint64_t);
    ASSERT_LE(a.size(), 8u);
    std::vector<uint64_t> p = a;
    p.resize(8, 0);  // extra integer arguments are ignored by the callee
    for (unsigned b = 0; b < grid; ++b)
      for (unsigned t = 0; t < block; ++t) {
        bi->x = b;
        ti->x = t;
        reinterpret_cast<F>(fn)(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
      }
  }

 private:
  static inline int next_ = 0;
  std::filesystem::path dir_;
  void* lib_ = nullptr;
};

graph::Value* input(graph::Graph& g, const Shape& sizes, DType t, Device device = kCPU) {
  TensorMeta m;
  m.sizes = sizes;
  m.strides = contiguous_strides(sizes);
  m.dtype = t;
  return g.add_input(m, device, graph::InputKind::Argument, "x");
}

// g's one elementwise group rendered for CUDA and run on the host on `inputs`, against the
// graph's eager result.
// `given`: the values of group inputs that are not graph inputs (a node's output left to eager).
// `device`: the one the plan is for (a graph whose values are marked as a GPU's plans what only
// the GPU fuses), and `eager` the same graph on the host, which gives the reference (inputs
// are the host's all the same).
void expect_host_run_matches(const graph::Graph& g, const std::vector<Tensor>& inputs,
                             const std::string& what,
                             const std::vector<std::pair<const graph::Value*, Tensor>>& given = {},
                             Device device = kCPU, const graph::Graph* eager = nullptr) {
  const FusionPlan plan = plan_fusion(g, device);
  ASSERT_EQ(plan.groups.size(), 1u) << what;
  const FusionGroup& grp = plan.groups[0];
  ASSERT_TRUE(grp.row == nullptr && grp.gemm == nullptr) << what;
  const kir::Kernel k = lower_elementwise(grp, "kernel_0");
  std::ostringstream os;
  os << cuda_prelude();
  const CudaLaunch l = render_cuda_kernel(os, k);
  HostModule m(os.str());
  ASSERT_TRUE(m.ok()) << what;
  const std::vector<Tensor> want = (eager ? *eager : g).interpret(inputs);
  ASSERT_EQ(want.size(), 1u);
  // Arguments as the compiled graph passes them: the group's inputs, then its output.
  std::vector<uint64_t> args;
  for (const graph::Value* v : grp.inputs) {
    const auto at = std::find(g.inputs().begin(), g.inputs().end(), v);
    const auto kept = std::find_if(given.begin(), given.end(), [&](const auto& p) { return p.first == v; });
    ASSERT_TRUE(at != g.inputs().end() || kept != given.end()) << what;
    const Tensor& t = at != g.inputs().end() ? inputs[size_t(at - g.inputs().begin())] : kept->second;
    args.push_back(reinterpret_cast<uint64_t>(t.impl()->data()));
  }
  Tensor out = empty(want[0].sizes(), TensorOptions(want[0].dtype()));
  args.push_back(reinterpret_cast<uint64_t>(out.impl()->data()));
  const int64_t n = want[0].numel();
  // A small grid, so that every thread strides over several vectors and the tail.
  const unsigned grid = std::min<unsigned>(3, cuda_grid(l, n, 1));
  m.launch("kernel_0", grid, unsigned(l.block), args);
  EXPECT_EQ(l.vector > 1, true) << what << ": the vector loop is what this test is for";
  // float32 exactly (the same operations in the same order); bfloat16 within a unit in the
  // last place, as the kernel keeps a chain's intermediates in float32.
  const Tensor got = out.to(DType::Float64), ref = want[0].to(DType::Float64);
  const double tol = want[0].dtype() == DType::Float32 ? 0.0 : 0.0078125;
  EXPECT_EQ((got - ref).abs().gt(ref.abs() * tol + tol * 1e-3).sum().item(), 0.0)
      << what << ": largest difference " << (got - ref).abs().amax().item();
}

TEST(RenderCudaHost, VectorLoopsWithBroadcastInputsMatchEager) {
  for (DType t : {DType::Float32, DType::BFloat16})
    for (int64_t n : {96, 95, 8}) {
      graph::Graph g;
      // 39 rows: with n = 95 the elements are no whole number of vectors, so the tail runs too.
      graph::Value* x = input(g, {39, n}, t);
      graph::Value* r = input(g, {39, 1}, t);
      graph::Value* c = input(g, {n}, t);
      graph::Value* s = g.add_node(OpId::sub, {x, r}, {}, {})->outputs[0];
      g.set_outputs({g.add_node(OpId::mul, {s, c}, {}, {})->outputs[0]});
      manual_seed(uint64_t(n));
      expect_host_run_matches(g, {randn({39, n}).to(t), randn({39, 1}).to(t), randn({n}).to(t)},
                              std::string(dtype_name(t)) + " n " + std::to_string(n));
    }
}

// dropout_rng (dropout as a GPU graph captures it, its draws from an rng_state input) fused
// with the add after it: each element's draw taken from its offset as the eager kernel takes
// it, in the vector loop and in the tail.
TEST(RenderCudaHost, DropoutFromAnRngStateMatchesEager) {
  const Device gpu{DeviceType::CUDA, 0};
  for (DType t : {DType::Float32, DType::BFloat16})
    for (int64_t n : {96, 95}) {
      // The graph as a GPU's (planned) and as the host's (interpreted for the reference).
      auto make = [&](graph::Graph& g, Device device) {
        graph::Value* x = input(g, {13, n}, t, device);
        graph::Value* r = input(g, {13, n}, t, device);
        graph::Value* rng = input(g, {2}, DType::Int64, device);
        Attrs a;
        a.value = 0.3;
        graph::Value* d = g.add_node(OpId::dropout_rng, {x, rng}, a, {})->outputs[0];
        g.set_outputs({g.add_node(OpId::add, {r, d}, {}, {})->outputs[0]});
      };
      graph::Graph g, host;
      make(g, gpu);
      make(host, kCPU);
      manual_seed(uint64_t(n));
      Tensor draws = zeros({2}, DType::Int64);
      static_cast<int64_t*>(draws.impl()->data())[0] = 987654321;
      static_cast<int64_t*>(draws.impl()->data())[1] = 4 * 12345;
      const std::string what = std::string(dtype_name(t)) + " n " + std::to_string(n);
      // Non-negative operands: the sum is no smaller than the dropped value, which the kernel
      // does not round to bfloat16 before the add (eager does), so the harness's relative
      // tolerance covers that rounding.
      const Tensor xs = randn({13, n}).abs().to(t);
      expect_host_run_matches(g, {xs, randn({13, n}).abs().to(t), draws}, what, {}, gpu, &host);
      // About 30% of the elements dropped (eager's choice, which the run matched).
      const double dropped =
          host.interpret({xs, zeros({13, n}, t), draws})[0].eq(0.0).sum().item() / double(13 * n);
      EXPECT_GT(dropped, 0.2) << what;
      EXPECT_LT(dropped, 0.4) << what;
      // The CPU plans no such kernel: its dropout is another composite, dropout_rng eager.
      const FusionPlan cpu = plan_fusion(g, kCPU);
      for (const FusionGroup& grp : cpu.groups)
        for (const graph::Node* node : grp.nodes) EXPECT_NE(node->op, OpId::dropout_rng) << what;
    }
}

// Slice grads summed into one row (cat's grad): pieces whose bounds are multiples of the
// vector take a vector access each (one per piece a vector), others an element at a time.
TEST(RenderCudaHost, MaskedLoadsInTheVectorLoopMatchEager) {
  const std::vector<std::vector<int64_t>> cuts = {{0, 32, 64, 96}, {0, 16, 32, 48},
                                                  {0, 20, 60, 96}, {0, 8, 12, 48}};
  for (DType t : {DType::Float32, DType::BFloat16})
    for (const std::vector<int64_t>& cut : cuts) {
      graph::Graph g;
      const int64_t n = cut.back();
      graph::Value* sum = nullptr;
      std::vector<Tensor> inputs;
      for (size_t p = 0; p + 1 < cut.size(); ++p) {
        const int64_t w = cut[p + 1] - cut[p];
        graph::Value* part = input(g, {20, w}, t);
        inputs.push_back(randn({20, w}).to(t));
        Attrs a;
        a.shape = {20, n};
        a.dim = 1;
        a.start = cut[p];
        a.end = cut[p + 1];
        graph::Value* grad = g.add_node(OpId::slice_backward, {part}, a, {})->outputs[0];
        sum = sum ? g.add_node(OpId::add, {sum, grad}, {}, {})->outputs[0] : grad;
      }
      g.set_outputs({sum});
      const std::string what = std::string(dtype_name(t)) + " cuts ending at " + std::to_string(n);
      // Which pieces take a vector access: one whose bounds are multiples of the vector.
      const int64_t lanes = t == DType::Float32 ? 4 : 8;
      int64_t whole = 0;
      for (size_t p = 0; p + 1 < cut.size(); ++p)
        whole += cut[p] % lanes == 0 && cut[p + 1] % lanes == 0;
      std::ostringstream os;
      render_cuda_kernel(os, lower_elementwise(plan_fusion(g).groups.at(0), "kernel_0"));
      int64_t vector_pieces = 0;
      for (size_t at = 0; (at = os.str().find(" = {};", at)) != std::string::npos; ++at)
        ++vector_pieces;
      EXPECT_EQ(vector_pieces, whole) << what << "\n" << os.str();
      expect_host_run_matches(g, inputs, what);
    }
}

// Cross entropy's grad compares each column with its class index, an arange: the kernel computes
// the index instead of reading it. The arange's buffer is handed over filled with -1, so a
// read of it would show.
TEST(RenderCudaHost, ArangeValuesAreComputedNotRead) {
  for (DType t : {DType::Float32, DType::BFloat16})
    for (int64_t n : {96, 77}) {
      graph::Graph g;
      graph::Value* logits = input(g, {13, n}, t);
      graph::Value* target = input(g, {13, 1}, DType::Int64);
      Attrs a;
      a.shape = {n};
      a.value = 0;
      a.value2 = 1;
      a.dtype = DType::Int64;
      graph::Value* classes = g.add_node(OpId::arange, {}, a, {})->outputs[0];
      graph::Value* hit = g.add_node(OpId::eq, {target, classes}, {}, {})->outputs[0];
      Attrs c;
      c.dtype = t;
      graph::Value* one = g.add_node(OpId::cast, {hit}, c, {})->outputs[0];
      g.set_outputs({g.add_node(OpId::sub, {logits, one}, {}, {})->outputs[0]});
      const FusionPlan plan = plan_fusion(g);
      ASSERT_EQ(plan.groups.size(), 1u);
      const kir::Kernel k = lower_elementwise(plan.groups[0], "kernel_0");
      int iotas = 0;
      for (const kir::Stmt& s : k.body) iotas += s.kind == kir::Stmt::Kind::Load && s.iota;
      EXPECT_EQ(iotas, 1) << kir::print(k);
      manual_seed(uint64_t(n));
      const Tensor poison = full({n}, -1.0, DType::Int64);
      expect_host_run_matches(g, {randn({13, n}).to(t), randint(0, n, {13, 1}, DType::Int64)},
                              std::string(dtype_name(t)) + " n " + std::to_string(n),
                              {{classes, poison}});
    }
}

// A backend that keeps each graph with the inputs of its runs, and runs it as "eager" does.
class RunKeeper : public capture::Backend {
 public:
  struct Run {
    std::shared_ptr<const graph::Graph> g;
    std::vector<Tensor> inputs;
  };
  std::string name() const override { return "keep-runs-for-cuda-host"; }
  std::shared_ptr<const capture::Runnable> compile(std::shared_ptr<const graph::Graph> g) override {
    struct Keeping : capture::Runnable {
      std::shared_ptr<const graph::Graph> g;
      std::shared_ptr<const capture::Runnable> eager;
      std::vector<Run>* runs;
      std::vector<Tensor> run(const std::vector<Tensor>& in) const override {
        std::vector<Tensor> copies;
        for (const Tensor& t : in) copies.push_back(t.defined() ? t.clone() : t);
        runs->push_back({g, copies});
        return eager->run(in);
      }
    };
    auto k = std::make_shared<Keeping>();
    k->g = g;
    k->eager = capture::backend("eager").compile(g);
    k->runs = &runs;
    return k;
  }
  std::vector<Run> runs;
};

// Every elementwise kernel of 150 random programs (test/support/program_gen.h), rendered for
// CUDA and run on the host on the values its graph computes eagerly, against those values.
TEST(RenderCudaHost, ElementwiseKernelsOfRandomProgramsMatchEager) {
  auto keeper = std::make_unique<RunKeeper>();
  RunKeeper* kept = keeper.get();
  capture::register_backend(std::move(keeper));
  ASSERT_EQ(testgen::check_programs_through(kept->name(), 1, 150), "");
  ASSERT_FALSE(kept->runs.empty());
  size_t ran = 0, vector_loops = 0, shared_coords = 0, masked = 0;
  for (const RunKeeper::Run& r : kept->runs) {
    // Every value of the graph, as eager computes it.
    std::vector<Tensor> env = bind_inputs(*r.g, r.inputs);
    for (const auto& n : r.g->nodes())
      if (!run_captured_view(*n, env)) dispatch_node(*n, env);
    const FusionPlan plan = plan_fusion(*r.g);
    std::vector<const FusionGroup*> groups;
    std::vector<kir::Kernel> ks;
    for (const FusionGroup& grp : plan.groups) {
      if (grp.row || grp.gemm || is_pattern(grp)) continue;
      kir::Kernel k = lower_elementwise(grp, "kernel_" + std::to_string(ks.size()));
      if (!k.size_symbols().empty()) continue;
      groups.push_back(&grp);
      ks.push_back(std::move(k));
    }
    if (ks.empty()) continue;
    std::ostringstream os;
    os << cuda_prelude();
    std::vector<CudaLaunch> launches;
    for (const kir::Kernel& k : ks) launches.push_back(render_cuda_kernel(os, k));
    HostModule m(os.str());
    ASSERT_TRUE(m.ok());
    for (size_t i = 0; i < ks.size(); ++i) {
      const FusionGroup& grp = *groups[i];
      // As the compiled graph runs it: a kernel's index math is its captured layout's, so an
      // input laid out otherwise (as eager may make it here) leaves the group to eager there.
      bool captured_layout = true;
      std::vector<uint64_t> args;
      for (const graph::Value* v : grp.inputs) {
        const Tensor& t = env[size_t(v->id)];
        captured_layout &= t.sizes() == v->meta.sizes && t.dtype() == v->meta.dtype &&
                           (t.numel() <= 1 || t.strides() == v->meta.strides);
        args.push_back(reinterpret_cast<uint64_t>(t.impl()->data()));
      }
      if (!captured_layout) continue;
      const Tensor& want = env[size_t(grp.output->id)];
      Tensor out = empty(want.sizes(), TensorOptions(want.dtype()));
      args.push_back(reinterpret_cast<uint64_t>(out.impl()->data()));
      if (args.size() > 8 || !want.is_contiguous()) continue;
      const unsigned grid = std::min<unsigned>(3, cuda_grid(launches[i], want.numel(), 1));
      if (grid > 0) m.launch(ks[i].name, grid, unsigned(launches[i].block), args);
      ++ran;
      vector_loops += launches[i].vector > 1;
      std::ostringstream one;
      render_cuda_kernel(one, ks[i]);
      shared_coords += one.str().find("cl0") != std::string::npos;
      masked += one.str().find("const int64_t j = cl;") != std::string::npos;
      const Tensor got = out.to(DType::Float64), ref = want.to(DType::Float64);
      const double tol = want.dtype() == DType::Float64 ? 1e-12 : is_floating(want.dtype()) ? 1e-5 : 0;
      // Off by more than tol, or NaN on one side only (NaN on both is a match).
      const Tensor bad =
          (got - ref).abs().gt(ref.abs() * tol + tol).logical_or(got.ne(got).ne(ref.ne(ref)));
      EXPECT_EQ(bad.sum().item(), 0.0) << ks[i].name << " of a graph with " << r.g->nodes().size()
                                       << " nodes";
    }
  }
  std::printf("[render_cuda host] %zu elementwise kernels of random programs ran on the host "
              "(%zu with a vector loop, %zu of them with coordinates once a vector, %zu with "
              "masked loads there)\n", ran, vector_loops, shared_coords, masked);
  EXPECT_GT(ran, 200u);
  EXPECT_GT(vector_loops, 100u);
  EXPECT_GT(shared_coords, 20u);
}

}  // namespace
}  // namespace ember::compiler
