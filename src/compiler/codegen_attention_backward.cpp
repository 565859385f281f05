// The attention backward kernel (FusionGroup::attn_bwd). Each thread takes whole batch
// matrices (a head of one sequence): it copies g, q, k and v^T into its own buffers, finds each
// probability row's last nonzero entry, then computes
//   ds rows:      dp = g v^T tile by tile, ds = p (dp - sum(dp p)) scale
//   dv, dk rows:  dv[j] = sum_i p[i][j] g[i],  dk[j] = sum_i ds[i][j] q[i]
//   dq rows:      dq[i] = sum_j ds[i][j] k[j]
// with register tiles of GCC vectors (16 floats) as in the forward kernel, skipping the terms
// past each row's last nonzero probability (under a causal mask, half of them). dp and ds never
// leave the thread's buffers. Under attention dropout, dp is multiplied by the scaled mask m
// before the softmax grad and dv sums (p * m)[i][j] g[i]. While one batch matrix is computed,
// the next one's inputs are prefetched.
#include <algorithm>

#include "compiler/codegen_util.h"
#include "graph/graph_util.h"

namespace ember::compiler {

namespace {

// Replaces each "@KEY@" in text by its value.
std::string fill(std::string text, const std::vector<std::pair<std::string, std::string>>& keys) {
  for (const auto& [k, v] : keys) text = replace_all(std::move(text), "@" + k + "@", v);
  return text;
}

// The helpers and buffers of a kernel, in a namespace of their own that kernels of the same
// shape and form (a model's layers) share (SharedCode), so the compiler builds them once.
constexpr const char* kHelpers = R"(namespace @NS@ {
constexpr int64_t T = @T@, D = @D@, W = 16, DV = D / W;
constexpr int64_t ORS = @ORS@;  // row stride of the results dq, dv (and dk when kDkRows)
constexpr bool kMask = @MASK@;  // under attention dropout: p * m in dv, dp * m in ds
constexpr bool kDkRows = @DKROWS@;  // dk written as rows; otherwise as dk^T [D][T] after the rest
constexpr float kScale = @SCALE@;
typedef float vec __attribute__((vector_size(64)));
inline vec load(const float* p) { vec v; __builtin_memcpy(&v, p, sizeof v); return v; }
inline void store(float* p, const vec& v) { __builtin_memcpy(p, &v, sizeof v); }
struct Buf {
  alignas(64) float ds[T][T];
  alignas(64) float vt[D][T];
  alignas(64) float g[T][D];
  alignas(64) float q[T][D];
  alignas(64) float k[T][D];
  alignas(64) float dk[T][D];
  alignas(64) float dp[@RP@][T];
  int64_t nz[T];  // per row: 1 + the index of the last nonzero probability
};
inline int64_t widest(const Buf& b, int64_t i0, int R) {
  int64_t n = 0;
  for (int r = 0; r < R; ++r) n = b.nz[i0 + r] > n ? b.nz[i0 + r] : n;
  return n;
}
// dp[r][j0, j0 + JV * W) = g[i0 + r] . v[j] for R rows.
template <int R, int JV>
inline void dp_block(Buf& b, int64_t i0, int64_t j0) {
  vec acc[R][JV] = {};
  for (int64_t d = 0; d < D; ++d) {
    vec vv[JV];
    for (int u = 0; u < JV; ++u) vv[u] = load(&b.vt[d][j0 + u * W]);
    for (int r = 0; r < R; ++r) {
      const float gd = b.g[i0 + r][d];
      for (int u = 0; u < JV; ++u) acc[r][u] += gd * vv[u];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < JV; ++u) store(&b.dp[r][j0 + u * W], acc[r][u]);
}
// ds rows i0 .. i0 + R.
template <int R>
inline void ds_rows(Buf& b, const float* __restrict p, const float* __restrict msk, int64_t i0) {
  const int64_t n = (widest(b, i0, R) + W - 1) / W * W;
  int64_t j0 = 0;
  for (; j0 + 4 * W <= n; j0 += 4 * W) dp_block<R, 4>(b, i0, j0);
  for (; j0 < n; j0 += W) dp_block<R, 1>(b, i0, j0);
  for (int r = 0; r < R; ++r) {
    const int64_t i = i0 + r, m = b.nz[i];
    const float* __restrict pr = p + i * @PR@;
    float* __restrict dp = b.dp[r];
    float* __restrict ds = b.ds[i];
    if (kMask) {
      const float* __restrict mr = msk + i * @MR@;
#pragma omp simd
      for (int64_t j = 0; j < m; ++j) dp[j] *= mr[j];
    }
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < m; ++j) s += dp[j] * pr[j];
#pragma omp simd
    for (int64_t j = 0; j < m; ++j) ds[j] = pr[j] * (dp[j] - s) * kScale;
    for (int64_t j = m; j < T; ++j) ds[j] = 0;
  }
}
// dv rows (PART & 1) and dk rows (PART & 2) j0 .. j0 + R (columns of p and ds), over the rows
// that reach them. Wide heads take the two in separate passes, each with more columns at once.
template <int R, int PART>
inline void dvdk_rows(Buf& b, const float* __restrict p, const float* __restrict msk, int64_t j0,
                      float* __restrict dv, float* __restrict dk) {
  constexpr bool kV = PART & 1, kK = PART & 2;
  vec av[kV ? R : 1][DV] = {}, ak[kK ? R : 1][DV] = {};
  for (int64_t i = 0; i < T; ++i) {
    if (b.nz[i] <= j0) continue;
    const float* __restrict pr = p + i * @PR@ + j0;
    const float* __restrict mr = kMask ? msk + i * @MR@ + j0 : pr;
    vec gv[DV], qv[DV];
    for (int u = 0; u < DV; ++u) {
      if (kV) gv[u] = load(&b.g[i][u * W]);
      if (kK) qv[u] = load(&b.q[i][u * W]);
    }
    for (int r = 0; r < R; ++r) {
      if (kV) {
        const float pij = kMask ? pr[r] * mr[r] : pr[r];
        for (int u = 0; u < DV; ++u) av[r][u] += pij * gv[u];
      }
      if (kK) {
        const float sij = b.ds[i][j0 + r];
        for (int u = 0; u < DV; ++u) ak[r][u] += sij * qv[u];
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < DV; ++u) {
      if (kV) store(dv + (j0 + r) * ORS + u * W, av[r][u]);
      if (kK) store(kDkRows ? dk + (j0 + r) * ORS + u * W : &b.dk[j0 + r][u * W], ak[r][u]);
    }
}
// dq rows i0 .. i0 + R.
template <int R>
inline void dq_rows(Buf& b, int64_t i0, float* __restrict dq) {
  const int64_t n = widest(b, i0, R);
  vec aq[R][DV] = {};
  for (int64_t j = 0; j < n; ++j) {
    vec kv[DV];
    for (int u = 0; u < DV; ++u) kv[u] = load(&b.k[j][u * W]);
    for (int r = 0; r < R; ++r) {
      const float s = b.ds[i0 + r][j];
      for (int u = 0; u < DV; ++u) aq[r][u] += s * kv[u];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < DV; ++u) store(dq + (i0 + r) * ORS + u * W, aq[r][u]);
}
}  // namespace @NS@
)";

constexpr const char* kBody = R"(extern "C" void @NAME@(void* const* args) {
  using namespace @NS@;
  const float* __restrict G = static_cast<const float*>(args[0]);   // @VG@
  const float* __restrict VT = static_cast<const float*>(args[1]);  // @VVT@
  const float* __restrict P = static_cast<const float*>(args[2]);   // @VP@
  const float* __restrict K = static_cast<const float*>(args[3]);   // @VK@
  const float* __restrict QT = static_cast<const float*>(args[4]);  // @VQT@
@OUTS@  const int64_t NB = @NB@;
  const float* __restrict M = @MASKARG@;
  // The input matrices of batch entry bh: g, v^T, p, k, q^T (or q), and the mask.
  auto locate = [&](int64_t bh, const float** m) {
@OFFSETS@  };
#pragma omp parallel if (NB > 1)
  {
    Buf* bp = static_cast<Buf*>(::operator new(sizeof(Buf), std::align_val_t(64)));
    Buf& b = *bp;
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < NB; ++bh) {
      const float* mats[6];
      locate(bh, mats);
      const float* __restrict g = mats[0];
      const float* __restrict vt = mats[1];
      const float* __restrict p = mats[2];
      const float* __restrict k = mats[3];
      const float* __restrict qt = mats[4];
      const float* __restrict msk = mats[5];
      if (bh + 1 < NB) {  // the next entry's inputs, fetched while this one computes
        const float* nx[6];
        locate(bh + 1, nx);
        for (int64_t i = 0; i < T; ++i) {
          for (int64_t c = 0; c < T; c += W) {
            __builtin_prefetch(nx[2] + i * @PR@ + c);
            if (kMask) __builtin_prefetch(nx[5] + i * @MR@ + c);
          }
          for (int64_t d = 0; d < D; d += W) {
            __builtin_prefetch(nx[0] + i * @GR@ + d * @GC@);
            __builtin_prefetch(nx[1] + d * @VR@ + i * @VC@);
            __builtin_prefetch(nx[3] + i * @KR@ + d * @KC@);
            __builtin_prefetch(nx[4] + d * @QR@ + i * @QC@);
          }
        }
      }
      for (int64_t i = 0; i < T; ++i)
        for (int64_t d = 0; d < D; ++d) {
          b.g[i][d] = g[i * @GR@ + d * @GC@];
          b.q[i][d] = qt[d * @QR@ + i * @QC@];
          b.k[i][d] = k[i * @KR@ + d * @KC@];
        }
      for (int64_t d = 0; d < D; ++d)
        for (int64_t j = 0; j < T; ++j) b.vt[d][j] = vt[d * @VR@ + j * @VC@];
      for (int64_t i = 0; i < T; ++i) {
        const float* __restrict pr = p + i * @PR@;
        int64_t m = T;
        for (; m >= W; m -= W) {
          bool zero = true;
          for (int64_t l = 0; l < W; ++l) zero &= pr[m - W + l] == 0.f;
          if (!zero) break;
        }
        while (m > 0 && pr[m - 1] == 0.f) --m;
        b.nz[i] = m;
      }
      int64_t i0 = 0;
      for (; i0 + @RP@ <= T; i0 += @RP@) ds_rows<@RP@>(b, p, msk, i0);
      for (; i0 < T; ++i0) ds_rows<1>(b, p, msk, i0);
@RESULTS@
      int64_t j0 = 0;
@DVDK@
      for (i0 = 0; i0 + @RQ@ <= T; i0 += @RQ@) dq_rows<@RQ@>(b, i0, dq);
      for (; i0 < T; ++i0) dq_rows<1>(b, i0, dq);
      if (!kDkRows)
        for (int64_t d = 0; d < D; ++d)
          for (int64_t j = 0; j < T; ++j) dk[d * T + j] = b.dk[j][d];
    }
    ::operator delete(bp, std::align_val_t(64));
  }
}

)";

}  // namespace

void emit_attention_backward_kernel(std::ostringstream& os, const std::string& name,
                                    const FusionGroup& grp, SharedCode& shared) {
  const FusionGroup::AttentionBackward& ab = *grp.attn_bwd;
  const graph::Value* in[6] = {grp.inputs[0],
                               grp.inputs[1],
                               grp.inputs[2],
                               grp.inputs[3],
                               grp.inputs[4],  // g, v^T, p, k, q^T (or q)
                               ab.mask ? grp.inputs[5] : nullptr};
  const size_t nd = in[2]->meta.sizes.size();
  const int64_t t = in[2]->meta.sizes[nd - 1], d = in[0]->meta.sizes[nd - 1];
  const Shape batch(in[2]->meta.sizes.begin(), in[2]->meta.sizes.end() - 2);
  const int64_t dv = d / 16;
  // Register tiles: at most 24 accumulators of AVX-512's 32 vector registers.
  const int64_t rp = 6, rkv = std::max<int64_t>(1, 12 / dv), rq = std::max<int64_t>(1, 24 / dv);
  // dv and dk together (one pass over the rows), or, from heads of 64 on, in two passes of
  // twice the columns each.
  std::ostringstream dvdk;
  const bool two_passes = dv >= 4;
  const int64_t rows = two_passes ? rq : rkv;
  for (int part : two_passes ? std::vector<int>{1, 2} : std::vector<int>{3}) {
    const std::string args = "(b, p, msk, j0, dv, dk);\n";
    dvdk << "      j0 = 0;\n"
         << "      for (; j0 + " << rows << " <= T; j0 += " << rows << ") dvdk_rows<" << rows
         << ", " << part << ">" << args << "      for (; j0 < T; ++j0) dvdk_rows<1, " << part << ">"
         << args;
  }
  // Argument slots of the three results: the group's output, then its extra outputs.
  const size_t nin = grp.inputs.size();
  auto slot = [&](const graph::Node* n) {
    const graph::Value* v = n->outputs[0];
    if (v == grp.output) return std::to_string(nin);
    for (size_t e = 0; e < grp.extra_outputs.size(); ++e)
      if (grp.extra_outputs[e] == v) return std::to_string(nin + 1 + e);
    return std::string("?");
  };
  auto stride = [&](const graph::Value* v, size_t dim) {
    return std::to_string(v->meta.strides[dim]);
  };
  // Each input's offset for batch matrix bh: its batch indices times its batch strides.
  std::ostringstream off;
  off << "    int64_t rest = bh;\n";
  std::vector<std::string> idx(batch.size());
  for (size_t k = batch.size(); k-- > 0;) {
    idx[k] = "bi" + std::to_string(k);
    off << "    const int64_t " << idx[k] << " = rest % " << sz(batch[k]) << ";\n"
        << "    rest /= " << sz(batch[k]) << ";\n";
  }
  off << "    (void)rest;\n";
  const char* bases[6] = {"G", "VT", "P", "K", "QT", "M"};
  for (size_t a = 0; a < 6; ++a) {
    if (a == 5 && !ab.mask) {
      off << "    m[5] = nullptr;\n";
      break;
    }
    off << "    m[" << a << "] = " << bases[a];
    for (size_t k = 0; k < batch.size(); ++k)
      if (batch[k] > 1) off << " + " << idx[k] << " * " << sz(in[a]->meta.strides[k]);
    off << ";\n";
  }
  // Where the results go: three buffers of their own, or the merged qkv grad.
  std::ostringstream outs, results;
  if (ab.merged) {
    const int64_t heads = batch.back(), rs = ab.merged->meta.sizes.back();
    outs << "  float* __restrict OUT = static_cast<float*>(args[" << nin << "]);  // "
         << value_type_str(*ab.merged) << "\n";
    const char* vars[3] = {"dq", "dk", "dv"};
    results << "      const int64_t hb = bh / " << sz(heads) << ", hh = bh % " << sz(heads) << ";\n";
    for (int r = 0; r < 3; ++r)
      results << "      float* __restrict " << vars[r] << " = OUT + hb * " << sz(t * rs) << " + "
              << ab.merged_start[r] << " + hh * " << d << ";\n";
  } else {
    const graph::Node* res[3] = {ab.dq, ab.dk, ab.dv};
    const char* vars[3] = {"DQ", "DKT", "DVO"};
    const char* locals[3] = {"dq", "dk", "dv"};
    for (int r = 0; r < 3; ++r) {
      outs << "  float* __restrict " << vars[r] << " = static_cast<float*>(args[" << slot(res[r])
           << "]);  // " << value_type_str(*res[r]->outputs[0]) << "\n";
      results << "      float* __restrict " << locals[r] << " = " << vars[r] << " + bh * " << t * d
              << ";\n";
    }
  }
  std::ostringstream scale;
  scale.precision(17);
  scale << ab.scale << "f";
  const std::vector<std::pair<std::string, std::string>> keys = {
      {"NAME", name},
      {"T", std::to_string(t)},
      {"D", std::to_string(d)},
      {"SCALE", scale.str()},
      {"RP", std::to_string(rp)},
      {"RQ", std::to_string(rq)},
      {"NB", sz(shape_numel(batch))},
      {"PR", stride(in[2], nd - 2)},
      {"GR", stride(in[0], nd - 2)},
      {"GC", stride(in[0], nd - 1)},
      {"VR", stride(in[1], nd - 2)},
      {"VC", stride(in[1], nd - 1)},
      {"KR", stride(in[3], nd - 2)},
      {"KC", stride(in[3], nd - 1)},
      // q^T [D][T] as given, or q [T][D] read through swapped strides.
      {"QR", stride(in[4], ab.dk_transposed ? nd - 2 : nd - 1)},
      {"QC", stride(in[4], ab.dk_transposed ? nd - 1 : nd - 2)},
      {"MASK", ab.mask ? "true" : "false"},
      {"MR", ab.mask ? stride(in[5], nd - 2) : "0"},
      {"MASKARG", ab.mask ? "static_cast<const float*>(args[5])" : "nullptr"},
      {"DVDK", dvdk.str()},
      {"ORS", std::to_string(ab.merged ? ab.merged->meta.sizes.back() : d)},
      {"DKROWS", ab.merged || !ab.dk_transposed ? "true" : "false"},
      {"OUTS", outs.str()},
      {"RESULTS", results.str()},
      {"VG", value_type_str(*in[0])},
      {"VVT", value_type_str(*in[1])},
      {"VP", value_type_str(*in[2])},
      {"VK", value_type_str(*in[3])},
      {"VQT", value_type_str(*in[4])},
      {"OFFSETS", off.str()},
  };
  os << "// " << name << ": attention backward over " << shape_numel(batch) << " matrices of " << t
     << " x " << t << " probabilities, head size " << d << "; fuses\n";
  for (const graph::Node* n : grp.nodes) os << "//   " << node_str(*n) << "\n";
  const std::string ns = shared.use(os, fill(kHelpers, keys), "attention_backward_");
  os << replace_all(fill(kBody, keys), "@NS@", ns);
}

}  // namespace ember::compiler
