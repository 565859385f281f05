// gemm_bias::run (kernels/gemm_bias.h) through cuBLASLt's bias epilogue (a residual as its C
// operand, beta 1). Row-major out = a @ b is computed column-major as out^T (n x rows) = b^T
// (n x k) @ a^T (k x rows), so the bias runs along cuBLASLt's rows, which is what its BIAS
// epilogue adds. The descriptors and the heuristic's algorithm are made once per shape and
// layout and kept; the workspace is one buffer a device. Products of at most four rows against
// a weight read through w.t() go to the gemv kernel instead (kernels/cuda/gemv.h), which
// rounds the product before its epilogue (rounds_product_first).
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/gemv.h"
#include "kernels/cuda/runtime.h"
#include "kernels/gemm_bias.h"

namespace ember::gemm_bias {

namespace {

constexpr size_t kWorkspace = size_t(32) << 20;  // cuBLASLt's suggestion for Hopper

bool ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;
};

// (device, dtype, rows, n, k, b transposed, b's ld, a's ld)
using Key = std::tuple<int, int, int64_t, int64_t, int64_t, bool, int64_t, int64_t>;

struct DeviceState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  bool usable = false;
};

DeviceState& device_state(int device) {
  static std::mutex mu;
  static std::map<int, DeviceState> states;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = states.try_emplace(device);
  if (fresh) {
    cuda::detail::use_device(device);
    it->second.usable = ok(cublasLtCreate(&it->second.handle)) &&
                        cudaMalloc(&it->second.workspace, kWorkspace) == cudaSuccess;
  }
  return it->second;
}

// The plan for one shape and layout, made on first use; plans that cuBLASLt has no algorithm
// for are kept as unusable.
const Plan& plan_of(const Key& key, cublasLtHandle_t handle, cudaDataType_t type) {
  static std::mutex mu;
  static std::map<Key, Plan> plans;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = plans.try_emplace(key);
  Plan& p = it->second;
  if (!fresh) return p;
  const auto [device, dt, rows, n, k, b_transposed, ldb, lda] = key;
  (void)device;
  (void)dt;
  const cublasOperation_t ta = b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  bool good = ok(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) &&
              ok(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta))) &&
              ok(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb))) &&
              ok(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                sizeof(epilogue)));
  // The first operand is b's memory: n x k column-major (ld = its row stride) or, transposed,
  // k x n (ld = its column stride); the second a's, k x rows; the result n x rows.
  good = good &&
         ok(cublasLtMatrixLayoutCreate(&p.la, type, uint64_t(b_transposed ? k : n),
                                       uint64_t(b_transposed ? n : k), ldb)) &&
         ok(cublasLtMatrixLayoutCreate(&p.lb, type, uint64_t(k), uint64_t(rows), lda)) &&
         ok(cublasLtMatrixLayoutCreate(&p.ld, type, uint64_t(n), uint64_t(rows), n));
  cublasLtMatmulPreference_t pref = nullptr;
  if (good && ok(cublasLtMatmulPreferenceCreate(&pref))) {
    const uint64_t ws = kWorkspace;
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    good = ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &ws, sizeof(ws))) &&
           ok(cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.la, p.lb, p.ld, p.ld, pref, 1,
                                             &result, &found)) &&
           found > 0;
    if (good) p.algo = result.algo;
    cublasLtMatmulPreferenceDestroy(pref);
  } else {
    good = false;
  }
  p.usable = good;
  return p;
}

}  // namespace

bool run(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
         const Tensor& residual, bool gelu, const LayerNormIn* ln) {
  const DType dt = out.dtype();
  if (dt != DType::BFloat16 && dt != DType::Float16) return false;
  const Device dev = out.device();
  if (ln) {
    for (const Tensor* t : {&ln->weight, &ln->bias})
      if (!t->defined() || t->dtype() != dt || t->device() != dev || !t->is_contiguous() ||
          t->dim() != 1 || t->sizes()[0] != a.sizes().back())
        return false;
  }
  // No bias: only the gemv kernel, to take a layer_norm (the product alone is the matmul op's).
  if (!bias.defined() && (!ln || gelu || residual.defined())) return false;
  for (const Tensor* t : {&a, &b})
    if (!t->defined() || t->dtype() != dt || t->device() != dev) return false;
  if (bias.defined() && (bias.dtype() != dt || bias.device() != dev || bias.dim() != 1 ||
                         !bias.is_contiguous()))
    return false;
  if (dev.type != DeviceType::CUDA || a.dim() < 2 || b.dim() != 2 || out.dim() != a.dim() ||
      !out.is_contiguous())
    return false;
  const int64_t k = a.sizes().back(), n = b.sizes()[1];
  if (b.sizes()[0] != k || (bias.defined() && bias.sizes()[0] != n) ||
      out.sizes().back() != n || k == 0 || n == 0)
    return false;
  for (int64_t d = 0; d + 1 < a.dim(); ++d)
    if (out.sizes()[size_t(d)] != a.sizes()[size_t(d)]) return false;
  // The residual: laid out as out (the gemm's C and D share one layout).
  if (residual.defined() &&
      (residual.dtype() != dt || residual.device() != dev || residual.sizes() != out.sizes() ||
       !residual.is_contiguous()))
    return false;
  const int64_t rows = out.numel() / n;
  if (rows == 0) return false;
  // a's rows: k contiguous elements, evenly apart across all its leading dims.
  if (k > 1 && a.strides().back() != 1) return false;
  // Their distance: the stride of the innermost leading dim of more than one entry (k when
  // there is one row); each dim further out steps over all the rows inside it.
  int64_t lda = k, next = -1;
  for (int64_t d = a.dim() - 2; d >= 0; --d) {
    const int64_t size = a.sizes()[size_t(d)], stride = a.strides()[size_t(d)];
    if (size == 1) continue;
    if (next < 0) lda = next = stride;
    if (stride != next) return false;
    next *= size;
  }
  if (lda < k) return false;
  // b as it lies: rows contiguous (column-major n x k) or columns contiguous (transposed).
  const int64_t sr = b.strides()[0], sc = b.strides()[1];
  bool b_transposed;
  int64_t ldb;
  if (sc == 1 && sr >= n) {
    b_transposed = false;
    ldb = sr;
  } else if (sr == 1 && sc >= k) {
    b_transposed = true;
    ldb = sc;
  } else {
    return false;
  }
  if (rows >= (int64_t(1) << 31) || n >= (int64_t(1) << 31) || k >= (int64_t(1) << 31))
    return false;
  // A few rows against w.t() (b_transposed, then): the gemv kernel, rounding the product first.
  if (rounds_product_first(rows, k, n, b.strides())) {
    if (cuda::gemv::run(a.impl()->data(), lda, b.impl()->data(), ldb,
                        bias.defined() ? bias.impl()->data() : nullptr,
                        residual.defined() ? residual.impl()->data() : nullptr,
                        out.impl()->data(), rows, n, k, dt, dev.index, /*round_product=*/true,
                        gelu, ln ? ln->weight.impl()->data() : nullptr,
                        ln ? ln->bias.impl()->data() : nullptr, ln ? float(ln->eps) : 0.0f))
      return true;
  }
  if (gelu || ln || !bias.defined()) return false;
  DeviceState& st = device_state(dev.index);
  if (!st.usable) return false;
  const cudaDataType_t type = dt == DType::BFloat16 ? CUDA_R_16BF : CUDA_R_16F;
  const Plan& p =
      plan_of(Key{dev.index, int(dt), rows, n, k, b_transposed, ldb, lda}, st.handle, type);
  if (!p.usable) return false;
  const void* bias_ptr = bias.impl()->data();
  if (!ok(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                         sizeof(bias_ptr))))
    return false;
  cuda::detail::use_device(dev.index);
  const float one = 1, zero = 0;
  const void* c = residual.defined() ? residual.impl()->data() : out.impl()->data();
  const cublasStatus_t s = cublasLtMatmul(
      st.handle, p.op, &one, b.impl()->data(), p.la, a.impl()->data(), p.lb,
      residual.defined() ? &one : &zero, c, p.ld, out.impl()->data(), p.ld, &p.algo,
      st.workspace, kWorkspace, cuda::detail::stream(dev.index));
  EMBER_CHECK(ok(s), "matmul with bias: cublasLtMatmul failed: ", cublasGetStatusName(s));
  return true;
}

}  // namespace ember::gemm_bias
