// Attention on cuDNN's fused kernels (attention_cudnn.h), through its frontend's graph API with
// libcudnn loaded at run time. Without the frontend's headers at build time the two entry points
// say no and ember's own kernels run.
#include "kernels/cuda/attention_cudnn.h"

#ifdef EMBER_WITH_CUDNN_FRONTEND
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/logs.h"
#include "core/make_tensor.h"
#include "kernels/cuda/runtime.h"

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // what the frontend's calls resolve through (loaded below)
}  // namespace cudnn_frontend
#endif

namespace ember::cuda {

#ifdef EMBER_WITH_CUDNN_FRONTEND
namespace {

namespace fe = cudnn_frontend;

void note(const std::string& text) {
  static const bool on = log_category_enabled("compiler");
  if (on) std::fprintf(stderr, "[ember:compiler] %s\n", text.c_str());
}

std::atomic<int> g_enabled{-1};  // -1: as EMBER_CUDNN_ATTENTION says
std::atomic<int64_t> g_runs{0};

bool enabled() {
  if (g_enabled.load() < 0) {
    const char* v = std::getenv("EMBER_CUDNN_ATTENTION");
    int expected = -1;
    g_enabled.compare_exchange_strong(expected, v && std::strcmp(v, "0") == 0 ? 0 : 1);
  }
  return g_enabled.load() == 1;
}

// libcudnn, loaded once (EMBER_CUDNN, else libcudnn.so.9); false when it cannot be.
bool loaded() {
  static const bool ok = [] {
    const char* path = std::getenv("EMBER_CUDNN");
    if (!path || !*path) path = "libcudnn.so.9";
    void* lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
      note(std::string("attention: cuDNN not loaded (") + dlerror() + "); ember's kernels run");
      return false;
    }
    fe::cudnn_dlhandle = lib;
    return true;
  }();
  return ok;
}

std::mutex& mutex() {
  static std::mutex m;
  return m;
}

// The device's handle (made under mutex()); null when cuDNN cannot make one.
cudnnHandle_t handle(int device) {
  static std::map<int, cudnnHandle_t> handles;
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  detail::use_device(device);
  cudnnHandle_t h = nullptr;
  if (fe::detail::create_handle(&h) != CUDNN_STATUS_SUCCESS) h = nullptr;
  handles[device] = h;
  return h;
}

// Compute capability 8.0 or more, asked once a device (no lock on the calls after).
bool capable(int device) {
  static std::array<std::atomic<int8_t>, 64> seen{};  // 0 not asked, 1 yes, 2 no
  if (device < 0 || device >= int(seen.size())) return false;
  int8_t v = seen[size_t(device)].load(std::memory_order_relaxed);
  if (v == 0) {
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    v = major >= 8 ? 1 : 2;
    seen[size_t(device)].store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

std::vector<int64_t> dims_of(const Tensor& t) {
  return {t.size(0), t.size(1), t.size(2), t.size(3)};
}
std::vector<int64_t> strides_of(const Tensor& t) {
  return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

// A tensor cuDNN reads or writes as it lies: [b, h, n, d], unit stride along d, every other
// stride a positive multiple of 8 elements (16 bytes), its data 16-byte aligned.
bool laid_out(const Tensor& t) {
  if (t.dim() != 4 || t.stride(3) != 1) return false;
  for (int64_t d = 0; d < 3; ++d)
    if (t.size(d) > 1 && (t.stride(d) <= 0 || t.stride(d) % 8 != 0)) return false;
  return reinterpret_cast<uintptr_t>(t.impl()->data()) % 16 == 0;
}

// Whether cuDNN takes attention over q [b, h, L, E], k and v [b, h, S, E] with these attrs.
bool takes(const Tensor& q, const Tensor& k, const Tensor& v, const Attrs& a) {
  if (!enabled() || a.value > 0) return false;  // dropout: ember's masks (the CPU's)
  if (q.dtype() != DType::BFloat16 && q.dtype() != DType::Float16) return false;
  if (!laid_out(q) || !laid_out(k) || !laid_out(v)) return false;
  for (int64_t d = 0; d < 2; ++d)
    if (k.size(d) != q.size(d) || v.size(d) != q.size(d)) return false;
  const int64_t e = q.size(3);
  if (k.size(3) != e || v.size(3) != e || e % 8 != 0 || e > 128) return false;
  if (q.size(2) == 0 || k.size(2) == 0 || v.size(2) != k.size(2)) return false;
  return capable(q.device().index) && loaded();
}

// A built graph and its workspace bytes; nullopt for a problem cuDNN refused.
struct Built {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
};
// What a graph is built for: direction, causal, scale, then each tensor's dtype, device, sizes
// and strides. Integers, so that the per-call lookup formats nothing.
using Key = std::vector<int64_t>;
enum Direction : int64_t { kForward, kBackward };

Key key_of(Direction dir, const std::vector<const Tensor*>& ts, const Attrs& a) {
  Key k{dir, a.flag, std::bit_cast<int64_t>(a.value2)};
  for (const Tensor* t : ts) {
    k.push_back(int64_t(t->dtype()));
    k.push_back(t->device().index);
    for (int64_t d = 0; d < t->dim(); ++d) {
      k.push_back(t->size(d));
      k.push_back(t->stride(d));
    }
  }
  return k;
}

// The key in words, for the log lines.
std::string describe(const Key& k) {
  std::ostringstream os;
  os << (k[0] == kForward ? "forward" : "backward") << (k[1] ? " causal" : "") << " scale "
     << std::bit_cast<double>(k[2]) << ", tensors (dtype, device, size:stride ...):";
  for (size_t i = 3; i < k.size(); ++i) os << " " << k[i];
  return os.str();
}

std::map<Key, std::optional<Built>>& graphs() {
  static std::map<Key, std::optional<Built>> g;
  return g;
}

// Validates, plans and builds g; the Built, or nullopt (noted) when a step fails.
std::optional<Built> build(std::shared_ptr<fe::graph::Graph> g, cudnnHandle_t h,
                           const Key& key) {
  auto failed = [&](fe::error_t e, const char* step) {
    if (e.is_good()) return false;
    note("attention: cuDNN " + std::string(step) + " failed (" + e.get_message() + ") for " + describe(key) +
         "; ember's kernels run");
    return true;
  };
  if (failed(g->validate(), "validate") || failed(g->build_operation_graph(h), "graph") ||
      failed(g->create_execution_plans({fe::HeurMode_t::A}), "plans") ||
      failed(g->check_support(h), "support") || failed(g->build_plans(h), "build"))
    return std::nullopt;
  Built b{g, 0};
  if (failed(g->get_workspace_size(b.workspace), "workspace")) return std::nullopt;
  note("attention: cuDNN graph built for " + describe(key));
  return b;
}

fe::DataType_t io_type(DType t) {
  return t == DType::BFloat16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

std::shared_ptr<fe::graph::Graph> new_graph(DType t) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(io_type(t))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name,
                                                    int64_t uid, const Tensor& t) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(dims_of(t))
                      .set_stride(strides_of(t)));
}

// lse [b, h, L] float32, contiguous, as cuDNN's stats [b, h, L, 1].
std::vector<int64_t> stats_dims(const Tensor& q) { return {q.size(0), q.size(1), q.size(2), 1}; }
std::vector<int64_t> stats_strides(const Tensor& q) {
  return {q.size(1) * q.size(2), q.size(2), 1, 1};
}

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// Runs the graph of `key` (built by make() the first time) on the device's stream; false when
// cuDNN refuses the problem or the run.
template <class Make>
bool run_locked(const Key& key, int device, Make make,
                std::unordered_map<int64_t, void*>& pack) {
  cudnnHandle_t h = handle(device);
  if (!h) return false;
  auto& cache = graphs();
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, build(make(), h, key)).first;
  if (!it->second) return false;
  const Built& b = *it->second;
  Tensor ws;
  if (b.workspace > 0) ws = make_tensor({(b.workspace + 7) / 8}, DType::Int64, Device{DeviceType::CUDA, device});
  detail::use_device(device);
  if (fe::detail::set_stream(h, detail::stream(device)) != CUDNN_STATUS_SUCCESS) return false;
  fe::error_t e = b.graph->execute(h, pack, ws.defined() ? ws.impl()->data() : nullptr);
  if (e.is_bad()) {
    note("attention: cuDNN execute failed (" + e.get_message() + ") for " + describe(key) +
         "; ember's kernels run from now on");
    it->second.reset();
    return false;
  }
  ++g_runs;
  return true;
}

// run_locked under the mutex; the frontend's exceptions (a library it cannot load, say) end
// in false, and that key is not tried again.
template <class Make>
bool run(const Key& key, int device, Make make, std::unordered_map<int64_t, void*> pack) {
  std::lock_guard<std::mutex> lock(mutex());
  try {
    return run_locked(key, device, make, pack);
  } catch (const std::exception& e) {
    note("attention: cuDNN raised (" + std::string(e.what()) + ") for " + describe(key) +
         "; ember's kernels run");
    graphs()[key].reset();
    return false;
  }
}

void* ptr(const Tensor& t) { return t.impl()->data(); }

}  // namespace

bool cudnn_attention(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  if (!takes(q, k, v, a) || !laid_out(out[0]) || out[1].dtype() != DType::Float32 ||
      !out[1].is_contiguous())
    return false;
  const Key key = key_of(kForward, {&q, &k, &v, &out[0]}, a);
  auto make = [&] {
    auto g = new_graph(q.dtype());
    auto Q = input(*g, "q", kQ, q), K = input(*g, "k", kK, k), V = input(*g, "v", kV, v);
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("attention")
                    .set_generate_stats(true)
                    .set_attn_scale(float(a.value2));
    if (a.flag) opts.set_causal_mask(true);
    auto [O, stats] = g->sdpa(Q, K, V, opts);
    O->set_output(true).set_uid(kO).set_dim(dims_of(out[0])).set_stride(strides_of(out[0]));
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(stats_dims(q))
        .set_stride(stats_strides(q));
    return g;
  };
  return run(key, q.device().index, make,
             {{kQ, ptr(q)}, {kK, ptr(k)}, {kV, ptr(v)}, {kO, ptr(out[0])}, {kStats, ptr(out[1])}});
}

bool cudnn_attention_backward(std::span<const Tensor> in, std::span<Tensor> out,
                              const Attrs& a) {
  const Tensor &q = in[0], &k = in[1], &v = in[2], &o = in[3], &lse = in[4], &go = in[5];
  if (!takes(q, k, v, a) || !laid_out(o) || !laid_out(go) || lse.dtype() != DType::Float32 ||
      !lse.is_contiguous() || !laid_out(out[0]) || !laid_out(out[1]) || !laid_out(out[2]))
    return false;
  const Key key = key_of(kBackward, {&q, &k, &v, &o, &go, &out[0], &out[1], &out[2]}, a);
  auto make = [&] {
    auto g = new_graph(q.dtype());
    auto Q = input(*g, "q", kQ, q), K = input(*g, "k", kK, k), V = input(*g, "v", kV, v);
    auto O = input(*g, "o", kO, o), dO = input(*g, "do", kDO, go);
    auto stats = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("stats")
                               .set_uid(kStats)
                               .set_dim(stats_dims(q))
                               .set_stride(stats_strides(q))
                               .set_data_type(fe::DataType_t::FLOAT));
    auto opts = fe::graph::SDPA_backward_attributes()
                    .set_name("attention_backward")
                    .set_attn_scale(float(a.value2));
    if (a.flag) opts.set_causal_mask(true);
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, opts);
    dQ->set_output(true).set_uid(kDQ).set_dim(dims_of(out[0])).set_stride(strides_of(out[0]));
    dK->set_output(true).set_uid(kDK).set_dim(dims_of(out[1])).set_stride(strides_of(out[1]));
    dV->set_output(true).set_uid(kDV).set_dim(dims_of(out[2])).set_stride(strides_of(out[2]));
    return g;
  };
  return run(key, q.device().index, make,
             {{kQ, ptr(q)},
              {kK, ptr(k)},
              {kV, ptr(v)},
              {kO, ptr(o)},
              {kStats, ptr(lse)},
              {kDO, ptr(go)},
              {kDQ, ptr(out[0])},
              {kDK, ptr(out[1])},
              {kDV, ptr(out[2])}});
}
void set_cudnn_attention(bool on) { g_enabled = on ? 1 : 0; }
bool cudnn_attention_available(int device) { return capable(device) && loaded(); }
int64_t cudnn_attention_runs() { return g_runs.load(); }
#else
bool cudnn_attention(std::span<const Tensor>, std::span<Tensor>, const Attrs&) { return false; }
bool cudnn_attention_backward(std::span<const Tensor>, std::span<Tensor>, const Attrs&) {
  return false;
}
void set_cudnn_attention(bool) {}
bool cudnn_attention_available(int) { return false; }
int64_t cudnn_attention_runs() { return 0; }
#endif

}  // namespace ember::cuda
