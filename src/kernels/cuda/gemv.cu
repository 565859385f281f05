// CUDA launch of the few-rows product (gemv.h; the kernel: gemv.cuh).
#include "kernels/cuda/gemv.cuh"

#include <cstdint>
#include <cstdlib>

#include "core/env.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/runtime.h"
#include "kernels/device_code.h"
#include "kernels/gemm_bias.h"

namespace ember::cuda::gemv {

namespace {

// A product of more columns than one wave of blocks takes, where columns_in_turn_fit, runs
// columns_kernel in one wave (the logits' projection of a decode step), unless
// EMBER_GEMV_COLUMNS=0. Read once.
bool columns_in_turn() {
  static const bool on = env_switch("EMBER_GEMV_COLUMNS", true);
  return on;
}

// A product of more blocks than this takes its columns in turn: EMBER_GEMV_COLUMNS_MIN where set
// (a block count), else a wave of the one-row gemv kernel's blocks (three a multiprocessor), so
// that a GPT-2 layer's 2304- and 3072-column projections stay one wave of that kernel and only
// the logits go to columns_kernel (whose wave is two blocks a multiprocessor). Read once.
int64_t columns_past(int device) {
  static const int64_t set = [] {
    const char* e = std::getenv("EMBER_GEMV_COLUMNS_MIN");
    return e ? std::strtoll(e, nullptr, 10) : int64_t(-1);
  }();
  return set >= 0 ? set : 3 * int64_t(device_code::multiprocessors(device));
}

}  // namespace

static_assert(kMaxRows == gemm_bias::kFewRows, "gemm_bias::rounds_product_first says which run here");

bool run(const void* x, int64_t ldx, const void* w, int64_t ldw, const void* bias,
         const void* residual, void* out, int64_t rows, int64_t n, int64_t k, DType dt,
         int device, bool round_product, bool gelu, const void* ln_w, const void* ln_b,
         float ln_eps) {
  if (rows < 1 || rows > kMaxRows || n < 1 || k < 1) return false;
  const bool ln = ln_w != nullptr;
  if (ln && (!ln_b || dtype_size(dt) != 2 || k <= 512 || k > 4096)) return false;
  if (dt != DType::Float32 && dt != DType::Float16 && dt != DType::BFloat16) return false;
  if (gelu && (residual || dt == DType::Float32)) return false;
  const int64_t v = 16 / int64_t(dtype_size(dt));
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  // The layer-normalized rows lie in shared memory, 16-byte aligned, k apart.
  const bool vectors =
      k % v == 0 && ldw % v == 0 && aligned(w) && (ln || (ldx % v == 0 && aligned(x)));
  const int split = split_of(n);
  if (blocks(n, split) >= (int64_t(1) << 31)) return false;
  Args a;
  a.x = x;
  a.w = w;
  a.bias = bias;
  a.residual = residual;
  a.out = out;
  a.M = rows;
  a.N = n;
  a.K = k;
  a.ldx = ldx;
  a.ldw = ldw;
  a.round_product = round_product;
  a.gelu = gelu;
  a.split = split;
  a.early = detail::early_dependents();
  a.vectors = vectors;
  size_t smem = kSharedBytes;
  if (ln) {
    a.ln_threads = layer_norm_threads(k);
    a.ln_w = ln_w;
    a.ln_b = ln_b;
    a.ln_eps = ln_eps;
    smem += layer_norm_shared_bytes(rows, k, dtype_size(dt));
  }
  detail::use_device(device);
  unsigned grid = unsigned(blocks(n, split));
  // Columns in turn: one wave of blocks, two a multiprocessor (columns_kernel's bound).
  const bool in_turn = columns_in_turn() && columns_in_turn_fit(a, dtype_size(dt)) &&
                       grid > columns_past(device) &&
                       grid > 2 * int64_t(device_code::multiprocessors(device));
  if (in_turn) {
    grid = unsigned(2 * device_code::multiprocessors(device));
    smem = columns_shared_bytes(ln, k, dtype_size(dt));
  }
  cudaStream_t s = detail::stream(device);
  auto launch = [&]<class T>() {
    auto go = [&](void (*kernel)(Args)) {
      EMBER_CHECK(detail::allow_shared(reinterpret_cast<const void*>(kernel), device, smem,
                                       "matmul (few rows)"),
                  "matmul (few rows): device ", device, " offers a block less than the ", smem,
                  " bytes of shared memory its kernel takes; set EMBER_GEMV_COLUMNS=0");
      detail::launch_after(kernel, dim3(grid), dim3(attn::kThreads), smem, s, "matmul (few rows)",
                           a);
    };
    if (in_turn) {
      if constexpr (sizeof(T) == 2) {
        if (ln) return go(columns_kernel<T, true>);
      }
      return go(columns_kernel<T>);
    }
    auto rows = [&]<bool kLn>() {
      switch (a.M) {
        case 1: go(gemv_kernel<T, 1, kLn>); break;
        case 2: go(gemv_kernel<T, 2, kLn>); break;
        case 3: go(gemv_kernel<T, 3, kLn>); break;
        default: go(gemv_kernel<T, 4, kLn>); break;
      }
    };
    if constexpr (sizeof(T) == 2) {
      if (ln) return rows.template operator()<true>();
    }
    rows.template operator()<false>();
  };
  switch (dt) {
    case DType::Float32: launch.operator()<float>(); break;
    case DType::Float16: launch.operator()<__half>(); break;
    default: launch.operator()<__nv_bfloat16>(); break;
  }
  detail::check(cudaGetLastError(), "matmul (few rows)");
  return true;
}

}  // namespace ember::cuda::gemv
