// The CUDA renderer (render_cuda.h) without a GPU: what it makes of elementwise and row kernels,
// and that NVRTC builds every elementwise and row kernel of the random programs for sm_90a
// (the programs' graphs are captured on the CPU; lowering does not depend on the device).
// Running the kernels is tests/cuda/cuda_compile_test.cpp's part, on a GPU.
#include <gtest/gtest.h>

#include "capture/capture.h"
#include "compiler/compiler_test_util.h"
#include "compiler/families.h"
#include "compiler/lower.h"
#include "compiler/pointwise_fusion.h"
#include "compiler/render_cuda.h"
#include "compiler/toolchain_cuda.h"
#include "ember/compile.h"
#include "support/program_check.h"
#include "support/program_gen.h"

namespace ember::compiler {
namespace {

// The kernels of g's plan the CUDA renderer takes (elementwise without a gemm, and rows).
std::vector<kir::Kernel> cuda_kernels(const graph::Graph& g, int* first_name) {
  std::vector<kir::Kernel> ks;
  const FusionPlan plan = plan_fusion(g);
  for (const FusionGroup& grp : plan.groups) {
    if (grp.gemm || is_pattern(grp)) continue;
    const std::string name = "kernel_" + std::to_string((*first_name)++);
    ks.push_back(grp.row ? lower_rows(grp, name) : lower_elementwise(grp, name));
  }
  return ks;
}

// One translation unit of the kernels, as the CUDA compiled graph writes its modules.
std::string render(const std::vector<kir::Kernel>& ks, std::vector<CudaLaunch>* launches) {
  std::ostringstream os;
  os << cuda_prelude();
  for (const kir::Kernel& k : ks) launches->push_back(render_cuda_kernel(os, k));
  return os.str();
}

graph::Value* input(graph::Graph& g, const Shape& sizes, DType t = DType::Float32) {
  TensorMeta m;
  m.sizes = sizes;
  m.strides = contiguous_strides(sizes);
  m.dtype = t;
  return g.add_input(m, kCPU, graph::InputKind::Argument, "x");
}

TEST(RenderCuda, ElementwiseKernelsMoveSixteenBytesPerAccess) {
  auto g = test::relu_add_mul_graph({4096, 1024});
  int next = 0;
  std::vector<CudaLaunch> launches;
  const std::string src = render(cuda_kernels(*g, &next), &launches);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].vector, 4);
  EXPECT_EQ(launches[0].work, kir::Index(4096 * 1024));
  EXPECT_NE(src.find("ember_vec<float, 4>"), std::string::npos) << src;
  EXPECT_NE(src.find("__global__"), std::string::npos);
  // A grid-stride loop: no more blocks than fill the GPU.
  EXPECT_EQ(cuda_grid(launches[0], 4096 * 1024, 132), 132u * 8);
  EXPECT_EQ(cuda_grid(launches[0], 4096 * 1024, 1000), 4096u * 1024 / (256 * 4));
  if (nvrtc_available()) {
    EXPECT_FALSE(nvrtc_compile(src, "sm_90a").empty());
  }
}

// A 16-bit gelu and its grad call the 16-bit forms (functors.h's GeluHalf and
// GeluBackwardHalf, with the GPU's fast reciprocal), and NVRTC builds them.
TEST(RenderCuda, SixteenBitGeluCallsItsOwnForm) {
  for (DType t : {DType::BFloat16, DType::Float16, DType::Float32}) {
    graph::Graph g;
    graph::Value* x = input(g, {64, 256}, t);
    graph::Value* dy = input(g, {64, 256}, t);
    g.set_outputs({g.add_node(OpId::gelu, {x}, {}, {})->outputs[0],
                   g.add_node(OpId::gelu_backward, {dy, x}, {}, {})->outputs[0]});
    int next = 0;
    std::vector<CudaLaunch> launches;
    const std::string src = render(cuda_kernels(g, &next), &launches);
    const bool half = t != DType::Float32;
    EXPECT_EQ(src.find("ember::fn::GeluHalf{}") != std::string::npos, half) << src;
    EXPECT_EQ(src.find("ember::fn::Gelu{}") != std::string::npos, !half) << src;
    EXPECT_EQ(src.find("ember::fn::GeluBackwardHalf{}") != std::string::npos, half) << src;
    EXPECT_EQ(src.find("ember::fn::GeluBackward{}") != std::string::npos, !half) << src;
    if (nvrtc_available()) {
      EXPECT_FALSE(nvrtc_compile(src, "sm_90a").empty()) << dtype_name(t);
    }
  }
}

// dropout_rng planned for a GPU joins the kernel of what reads it (a cast and an add, as a
// bfloat16 residual branch under autocast), drawing at each element's flat offset from its
// rng_state input; NVRTC builds it (with core/philox.h, which the prelude includes).
TEST(RenderCuda, DropoutFromAnRngStateJoinsItsReadersKernel) {
  const Device gpu{DeviceType::CUDA, 0};
  auto on_gpu = [&](const Shape& sizes, DType t) {
    TensorMeta m;
    m.sizes = sizes;
    m.strides = contiguous_strides(sizes);
    m.dtype = t;
    return m;
  };
  graph::Graph g;
  graph::Value* x = g.add_input(on_gpu({64, 384}, DType::BFloat16), gpu,
                                graph::InputKind::Argument, "x");
  graph::Value* r = g.add_input(on_gpu({64, 384}, DType::Float32), gpu,
                                graph::InputKind::Argument, "r");
  graph::Value* rng = g.add_input(on_gpu({2}, DType::Int64), gpu, graph::InputKind::Argument,
                                  "rng");
  Attrs a;
  a.value = 0.2;
  graph::Value* d = g.add_node(OpId::dropout_rng, {x, rng}, a, {})->outputs[0];
  Attrs c;
  c.dtype = DType::Float32;
  graph::Value* wide = g.add_node(OpId::cast, {d}, c, {})->outputs[0];
  g.set_outputs({g.add_node(OpId::add, {r, wide}, {}, {})->outputs[0]});
  const FusionPlan plan = plan_fusion(g, gpu);
  ASSERT_EQ(plan.groups.size(), 1u);
  ASSERT_EQ(plan.groups[0].nodes.size(), 3u);
  EXPECT_EQ(plan.groups[0].nodes[0]->op, OpId::dropout_rng);
  const kir::Kernel k = lower_elementwise(plan.groups[0], "kernel_0");
  EXPECT_NE(kir::print(k).find("dropout("), std::string::npos) << kir::print(k);
  std::ostringstream os;
  os << cuda_prelude();
  const CudaLaunch l = render_cuda_kernel(os, k);
  EXPECT_EQ(l.vector, 4);  // the float32 result's 16 bytes
  // x (in0) dropped at the flat offset from the rng_state (in1), kept below 0.8 * 2^32: in the
  // vector loop four neighbours spell one Philox block (computed once), in the tail each
  // element its own.
  EXPECT_NE(os.str().find("ember_dropout<float>(v0, in1, uint64_t(q) * 1 + uint64_t(u / 4), "
                          "u & 3, 3435973836ull, float("),
            std::string::npos)
      << os.str();
  EXPECT_NE(os.str().find("ember_dropout<float>(v0, in1, uint64_t(i) >> 2, int(uint64_t(i) & 3), "
                          "3435973836ull, float("),
            std::string::npos)
      << os.str();
  if (nvrtc_available()) {
    EXPECT_FALSE(nvrtc_compile(os.str(), "sm_90a").empty());
  }
}

TEST(RenderCuda, BroadcastInputsReadThroughIndexMathAndMaskedOnesScalar) {
  graph::Graph g;
  graph::Value* x = input(g, {64, 96});
  graph::Value* b = input(g, {96});
  graph::Value* s = g.add_node(OpId::add, {x, b}, {}, {})->outputs[0];
  g.set_outputs({g.add_node(OpId::relu, {s}, {}, {})->outputs[0]});
  int next = 0;
  std::vector<CudaLaunch> launches;
  const std::string src = render(cuda_kernels(g, &next), &launches);
  EXPECT_NE(src.find("in1[(i%96)]"), std::string::npos) << src;
  if (nvrtc_available()) {
    EXPECT_FALSE(nvrtc_compile(src, "sm_90a").empty());
  }
}

// In the vector loop, inputs read through index math start from coordinates computed once a
// vector when the last dim is a multiple of the vector (here 4 floats): a row-broadcast
// [64, 1] input reads at the vector's row c0, a column-broadcast one at cl = cl0 + u.
TEST(RenderCuda, VectorLoopsComputeCoordinatesOnceAVector) {
  for (int64_t n : {96, 95}) {
    graph::Graph g;
    graph::Value* x = input(g, {64, n});
    graph::Value* r = input(g, {64, 1});
    graph::Value* c = input(g, {n});
    graph::Value* s = g.add_node(OpId::sub, {x, r}, {}, {})->outputs[0];
    g.set_outputs({g.add_node(OpId::mul, {s, c}, {}, {})->outputs[0]});
    int next = 0;
    std::vector<CudaLaunch> launches;
    const std::string src = render(cuda_kernels(g, &next), &launches);
    ASSERT_EQ(launches.size(), 1u);
    EXPECT_EQ(launches[0].vector, 4);
    const bool shared = n % 4 == 0;
    EXPECT_EQ(src.find("const int64_t cl = cl0 + u;") != std::string::npos, shared) << src;
    EXPECT_EQ(src.find("in1[c0]") != std::string::npos, shared) << src;
    EXPECT_EQ(src.find("in2[cl]") != std::string::npos, shared) << src;
    if (nvrtc_available()) {
      EXPECT_FALSE(nvrtc_compile(src, "sm_90a").empty());
    }
  }
}

// Masked loads (a slice's grad, as q, k and v's grads are put together) take the vector loop
// when a vector stays within a row (96 = 24 vectors of 4 floats), reading the column j as
// cl; with rows of 95 they stay one element at a time.
TEST(RenderCuda, MaskedLoadsTakeTheVectorLoopWhenRowsHoldWholeVectors) {
  for (int64_t n : {96, 95}) {
    graph::Graph g;
    const int64_t w = n / 3;
    graph::Value* parts[3];
    graph::Value* sum = nullptr;
    for (int p = 0; p < 3; ++p) {
      parts[p] = input(g, {64, w});
      Attrs a;
      a.shape = {64, n};
      a.dim = 1;
      a.start = p * w;
      a.end = (p + 1) * w;
      graph::Value* grad = g.add_node(OpId::slice_backward, {parts[p]}, a, {})->outputs[0];
      sum = sum ? g.add_node(OpId::add, {sum, grad}, {}, {})->outputs[0] : grad;
    }
    g.set_outputs({sum});
    int next = 0;
    std::vector<CudaLaunch> launches;
    const std::string src = render(cuda_kernels(g, &next), &launches);
    ASSERT_EQ(launches.size(), 1u) << src;
    EXPECT_EQ(launches[0].vector, n % 4 == 0 ? 4 : 1) << src;
    EXPECT_EQ(src.find("const int64_t j = cl;") != std::string::npos, n % 4 == 0) << src;
    if (nvrtc_available()) {
      EXPECT_FALSE(nvrtc_compile(src, "sm_90a").empty());
    }
  }
}

TEST(RenderCuda, ShortRowsStayInRegistersAndLongOnesArePassedAgain) {
  for (const int64_t n : {384, 50304}) {
    graph::Graph g;
    graph::Value* x = input(g, {32, n});
    Attrs a;
    a.dim = 1;
    graph::Value* sm = g.add_node(OpId::softmax, {x}, a, {})->outputs[0];
    g.set_outputs({g.add_node(OpId::relu, {sm}, {}, {})->outputs[0]});
    int next = 0;
    std::vector<CudaLaunch> launches;
    const std::string src = render(cuda_kernels(g, &next), &launches);
    ASSERT_EQ(launches.size(), 1u) << src;
    EXPECT_TRUE(launches[0].rows);
    EXPECT_EQ(launches[0].work, kir::Index(32));
    EXPECT_EQ(launches[0].block, n == 384 ? 32 : 1024);
    EXPECT_EQ(src.find("xr[") != std::string::npos, n == 384) << src;
    if (nvrtc_available()) {
      EXPECT_FALSE(nvrtc_compile(src, "sm_90a").empty()) << src;
    }
  }
}

TEST(RenderCuda, RowsInRegistersMoveSixteenBytesPerAccessWhenAligned) {
  graph::Graph g;
  graph::Value* x = input(g, {64, 4096});
  graph::Value* w = input(g, {4096});
  graph::Value* b = input(g, {4096});
  Attrs a;
  a.shape = {4096};
  a.value = 1e-5;
  g.set_outputs({g.add_node(OpId::layer_norm, {x, w, b}, a, {})->outputs[0]});
  int next = 0;
  std::vector<CudaLaunch> launches;
  const std::string src = render(cuda_kernels(g, &next), &launches);
  ASSERT_EQ(launches.size(), 1u) << src;
  EXPECT_EQ(launches[0].block, 256);
  // x, w and b read as vectors, the output stored as one, on aligned rows; else scalars.
  EXPECT_NE(src.find("*reinterpret_cast<const ember_vec<float, 4>*>(in2 + 0 + jv)"),
            std::string::npos) << src;
  EXPECT_NE(src.find("*reinterpret_cast<ember_vec<float, 4>*>(out + r * n + jv) = o"),
            std::string::npos) << src;
  EXPECT_NE(src.find("} else {"), std::string::npos) << src;
  EXPECT_NE(src.find("L1_1.e[u]"), std::string::npos) << src;  // w
  EXPECT_NE(src.find("L2_1.e[u]"), std::string::npos) << src;  // b, at the same offsets
  if (nvrtc_available()) {
    EXPECT_FALSE(nvrtc_compile(src, "sm_90a").empty()) << src;
  }
}

// Under autocast, layer_norm computes in float32 and a cast takes its result to bfloat16 for
// the next matmul. On the GPU the cast is the row kernel's store: the kernel computes in float,
// stores bf16 (16-bit vectors on aligned rows) and its statistics as float, and the float32
// result is never written. On the CPU, and where the float result is read elsewhere too, the
// cast stays a kernel of its own.
TEST(RenderCuda, ARowOpsCastToSixteenBitsIsItsStore) {
  const Device gpu{DeviceType::CUDA, 0};
  for (const Device device : {gpu, kCPU})
    for (const bool float_read_elsewhere : {false, true}) {
      graph::Graph g;
      auto in = [&](const Shape& sizes) {
        return g.add_input(TensorMeta{sizes, contiguous_strides(sizes), 0, DType::Float32}, device,
                           graph::InputKind::Argument, "x");
      };
      graph::Value* x = in({64, 768});
      graph::Value* w = in({768});
      graph::Value* b = in({768});
      Attrs a;
      a.shape = {768};
      a.value = 1e-5;
      graph::Node* ln = g.add_node(OpId::layer_norm, {x, w, b}, a, {});
      Attrs c;
      c.dtype = DType::BFloat16;
      graph::Value* y16 = g.add_node(OpId::cast, {ln->outputs[0]}, c, {})->outputs[0];
      std::vector<graph::Value*> outs = {y16, ln->outputs[1], ln->outputs[2]};
      if (float_read_elsewhere) outs.push_back(ln->outputs[0]);
      g.set_outputs(outs);
      const FusionPlan plan = plan_fusion(g, device);
      if (float_read_elsewhere || device == kCPU) {
        EXPECT_EQ(plan.groups.size(), 2u);
        continue;
      }
      ASSERT_EQ(plan.groups.size(), 1u);
      const FusionGroup& grp = plan.groups[0];
      EXPECT_EQ(grp.row, ln);
      EXPECT_EQ(grp.output, y16);
      EXPECT_EQ(grp.extra_outputs,
                (std::vector<const graph::Value*>{ln->outputs[1], ln->outputs[2]}));
      const kir::Kernel k = lower_rows(grp, "ln_cast");
      std::ostringstream os;
      os << cuda_prelude();
      render_cuda_kernel(os, k);
      const std::string src = os.str();
      EXPECT_NE(src.find("uint16_t* __restrict__ out"), std::string::npos) << src;
      EXPECT_NE(src.find("float* __restrict__ stat"), std::string::npos) << src;
      EXPECT_NE(src.find("*reinterpret_cast<ember_vec<uint16_t, 4>*>(out + r * n + jv) = o"),
                std::string::npos)
          << src;
      EXPECT_NE(src.find("float_to_bf16"), std::string::npos) << src;
      if (nvrtc_available()) {
        EXPECT_FALSE(nvrtc_compile(src, "sm_90a").empty()) << src;
      }
    }
}

// Keeps the graphs it is given and runs them as backend "eager" does.
class GraphKeeper : public capture::Backend {
 public:
  std::string name() const override { return "keep-graphs-for-cuda"; }
  std::shared_ptr<const capture::Runnable> compile(std::shared_ptr<const graph::Graph> g) override {
    graphs.push_back(g);
    return capture::backend("eager").compile(std::move(g));
  }
  std::vector<std::shared_ptr<const graph::Graph>> graphs;
};

TEST(RenderCuda, NvrtcBuildsEveryKernelOfTheRandomPrograms) {
  if (!nvrtc_available()) GTEST_SKIP() << "no NVRTC on this machine (a build without the CUDA toolkit)";
  auto keeper = std::make_unique<GraphKeeper>();
  GraphKeeper* kept = keeper.get();
  capture::register_backend(std::move(keeper));
  constexpr uint64_t kPrograms = 200, kBatch = 50;
  size_t kernels = 0, rows = 0;
  for (uint64_t first = 1; first <= kPrograms; first += kBatch) {
    ASSERT_EQ(testgen::check_programs_through(kept->name(), first, kBatch), "");
    std::vector<kir::Kernel> ks;
    int next = 0;
    for (const auto& g : kept->graphs)
      for (kir::Kernel& k : cuda_kernels(*g, &next)) ks.push_back(std::move(k));
    kept->graphs.clear();
    std::vector<CudaLaunch> launches;
    const std::string src = render(ks, &launches);
    kernels += ks.size();
    for (const CudaLaunch& l : launches) rows += l.rows;
    try {
      nvrtc_compile(src, "sm_90a");
    } catch (const Error& e) {
      FAIL() << "programs " << first << " to " << first + kBatch - 1 << ": " << e.what();
    }
  }
  // The programs exercise both kinds, many times over.
  EXPECT_GT(kernels, 600u);
  EXPECT_GT(rows, 60u);
  std::printf("[render_cuda] %zu kernels (%zu row kernels) built by NVRTC\n", kernels, rows);
}

// Kernels over symbolic sizes (a family's, fitted from graphs of one program at several sizes)
// take the sizes as int64 parameters: NVRTC builds them too.
TEST(RenderCuda, NvrtcBuildsKernelsOverSymbolicSizes) {
  if (!nvrtc_available()) GTEST_SKIP() << "no NVRTC on this machine (a build without the CUDA toolkit)";
  clear_families();
  auto keeper = std::make_unique<GraphKeeper>();
  GraphKeeper* kept = keeper.get();
  capture::register_backend(std::move(keeper));
  std::vector<kir::Kernel> ks;
  int next = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const testgen::Program p = testgen::generate_symbolic_program(seed, testgen::size_schedule(seed));
    CompileOptions opts;
    opts.backend = kept->name();
    opts.dynamic = true;
    auto f = ember::compile([&p](const std::vector<Tensor>& xs) { return testgen::run_part(p, xs); },
                            opts);
    for (size_t call = 0; call < 3; ++call) {
      const testgen::Expected e = testgen::expected(p, call);
      f(testgen::call_args(p, e, call).args);
    }
    for (const auto& g : kept->graphs) {
      std::vector<kir::Kernel> lowered = cuda_kernels(*g, &next);
      if (lowered.empty()) continue;
      FamilyLookup fam = family_kernels(lowered, input_dims(*g), true, g->static_dims());
      if (!fam.kernels) continue;
      for (const kir::Kernel& k : *fam.kernels)
        if (!k.size_symbols().empty()) ks.push_back(k);
    }
    kept->graphs.clear();
  }
  clear_families();
  // Names unique in one translation unit.
  for (size_t i = 0; i < ks.size(); ++i) ks[i].name = "kernel_" + std::to_string(i);
  ASSERT_GT(ks.size(), 20u);
  std::vector<CudaLaunch> launches;
  const std::string src = render(ks, &launches);
  EXPECT_NE(src.find(", const int64_t s"), std::string::npos);
  if (std::getenv("DUMP_CUDA")) std::fprintf(stderr, "%s", src.c_str());
  try {
    nvrtc_compile(src, "sm_90a");
  } catch (const Error& e) {
    FAIL() << e.what();
  }
  std::printf("[render_cuda] %zu kernels over symbolic sizes built by NVRTC\n", ks.size());
}

}  // namespace
}  // namespace ember::compiler
