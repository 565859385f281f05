// The attention kernel: for each batch matrix, scores = q @ k row by row, the group's fused
// producers (scale, mask) and a max-subtracted softmax on the row while it sits in L1, then
// the row of softmax @ v accumulated directly; neither the scores nor the probabilities are
// stored. A causal mask skips the keys it sets to -inf.
#include <algorithm>
#include <cstdio>

#include "compiler/codegen_util.h"
#include "graph/graph_util.h"
#include "kernels/cpu/loops.h"

namespace ember::compiler {

namespace {

// The element offset of batch matrix `b` of a tensor of sizes s and strides st (batch dims:
// all but the last two).
std::string batch_offset(const Shape& s, const std::vector<int64_t>& st) {
  const size_t nb = s.size() - 2;
  std::string expr;
  int64_t inner = 1;
  for (size_t d = nb; d-- > 0;) {
    if (s[d] > 1 && st[d] != 0) {
      std::string coord = inner == 1 ? "b" : "(b / " + sz(inner) + ")";
      if (d > 0) coord = "(" + coord + " % " + sz(s[d]) + ")";
      const std::string term = coord + " * " + sz(st[d]);
      expr = expr.empty() ? term : term + " + " + expr;
    }
    inner *= s[d];
  }
  return expr.empty() ? "0" : expr;  // the storage offset is in the data pointer
}
std::string batch_offset(const graph::Value& v) {
  return batch_offset(v.meta.sizes, v.meta.strides);
}

// Where the kernel writes element [batch..., l, d] of softmax @ v: its own contiguous layout,
// or, with the heads merged back (FusionGroup::out_copy), the copy's.
std::vector<int64_t> output_strides(const FusionGroup& grp) {
  const Shape& ys = grp.attn_pv->outputs[0]->meta.sizes;
  if (!grp.out_copy) return contiguous_strides(ys);
  const std::vector<int64_t> cs = contiguous_strides(grp.out_copy->outputs[0]->meta.sizes);
  std::vector<int64_t> st(ys.size(), 0);
  const std::vector<int64_t>& perm = grp.out_permute->attrs.dims;
  for (size_t k = 0; k < perm.size(); ++k) st[size_t(perm[k])] = cs[k];
  return st;
}

// Register tiles: kQB query rows by kKV vectors (of keys for the scores, of output columns for
// softmax @ v): 24 accumulators of the 32 vector registers AVX-512 has, each loaded vector
// feeding kQB FMAs (6 rows made the 256-key attention 16% faster than 4; 8 rows spill).
constexpr int64_t kQB = 6;
constexpr int64_t kKV = 4;

// "base + a * stride" with the trivial cases folded.
std::string at(const std::string& a, int64_t stride) {
  if (stride == 0) return "0";
  return stride == 1 ? a : a + " * " + sz(stride);
}

// Horizontal max and sum of one 64-byte vector as a tree of lane shuffles: log2(W) dependent
// steps instead of W - 1.
void emit_horizontal(std::ostream& os, const char* T, const char* suffix, int W) {
  const char* I = W == 16 ? "int" : "long long";
  os << "typedef " << T << " ember_v" << suffix << " __attribute__((vector_size(64)));\n"
     << "typedef " << I << " ember_i" << suffix << " __attribute__((vector_size(64)));\n";
  for (const char* op : {"max", "sum"}) {
    os << "[[maybe_unused]] static inline " << T << " ember_h" << op << "_" << suffix << "(ember_v"
       << suffix << " v) {\n";
    for (int half = W / 2; half >= 1; half /= 2) {
      os << "  {\n    const ember_v" << suffix << " t = __builtin_shuffle(v, (ember_i" << suffix
         << "){";
      for (int l = 0; l < W; ++l) os << (l ? ", " : "") << (l ^ half);
      os << "});\n"
         << (std::string(op) == "max" ? "    v = v < t ? t : v;\n" : "    v += t;\n") << "  }\n";
    }
    os << "  return v[0];\n}\n";
  }
}

}  // namespace

void emit_attention_helpers(std::ostringstream& os) {
  os << "// Horizontal reductions of one vector, for the attention kernels' softmax rows.\n";
  emit_horizontal(os, "float", "f32", 16);
  emit_horizontal(os, "double", "f64", 8);
  os << "\n";
}

void emit_attention_kernel(std::ostringstream& os, const std::string& name,
                           const FusionGroup& grp) {
  const graph::Node& row = *grp.row;
  const graph::Node& qk = *grp.attn_qk;
  const graph::Node& pv = *grp.attn_pv;
  const graph::Value &q = *qk.inputs[0], &k = *qk.inputs[1], &v = *pv.inputs[1];
  const graph::Value& out = *grp.output;
  const char* T = c_type(out.meta.dtype);
  const Shape& ps = row.outputs[0]->meta.sizes;  // the scores: [batch..., L, S]
  const size_t nd = ps.size();
  const int64_t L = ps[nd - 2], S = ps[nd - 1], E = q.meta.sizes[nd - 1],
                D = out.meta.sizes[nd - 1];
  const int64_t nb = shape_numel(ps) / (L * S);
  std::vector<const graph::Node*> pre;
  for (const graph::Node* n : grp.nodes)
    if (n != &row) pre.push_back(n);

  os << "// " << name << ": attention over " << nb << " batch matrices, scores "
     << value_type_str(*row.outputs[0]) << (grp.causal ? ", causal" : "") << "\n";
  os << "//   " << node_str(qk) << "\n";
  for (const graph::Node* n : grp.nodes) os << "//   " << node_str(*n) << "\n";
  os << "//   " << node_str(pv) << "\n";
  if (!grp.extra_outputs.empty())
    os << "//   (" << var(grp.extra_outputs[0]) << ", the probabilities, is written out too)\n";
  if (grp.out_copy)
    os << "//   " << node_str(*grp.out_permute) << "\n//   " << node_str(*grp.out_copy)
       << "  (written in place)\n";
  os << "extern \"C\" void " << name << "(void* const* args) {\n";
  for (size_t j = 0; j < grp.inputs.size(); ++j)
    os << "  const " << T << "* __restrict in" << j << " = static_cast<const " << T
       << "*>(args[" << j << "]);  // " << var(grp.inputs[j]) << " "
       << value_type_str(*grp.inputs[j]) << "\n";
  size_t arg = grp.inputs.size();
  const char* names[] = {"qm", "km", "vm"};
  const graph::Value* mats[] = {&q, &k, &v};
  for (int m = 0; m < 3; ++m)
    os << "  const " << T << "* __restrict " << names[m] << " = static_cast<const " << T
       << "*>(args[" << arg++ << "]);  // " << var(mats[m]) << " " << value_type_str(*mats[m])
       << "\n";
  os << "  " << T << "* __restrict out = static_cast<" << T << "*>(args[" << arg
     << "]);  // " << var(&out) << "\n";
  // The probabilities themselves, when the graph hands them out (contiguous, [batch..., L, S]).
  const bool probs_out = !grp.extra_outputs.empty();
  if (probs_out)
    os << "  " << T << "* __restrict pm = static_cast<" << T << "*>(args[" << arg + 1
       << "]);  // " << var(grp.extra_outputs[0]) << "\n";
  for (size_t j = 0; j < grp.inputs.size(); ++j)
    if (shape_numel(grp.inputs[j]->meta.sizes) == 1)
      os << "  const " << T << " " << var(grp.inputs[j]) << " = in" << j << "[0];\n";
  // The batch and sequence sizes may be symbolic (kir::Pattern); the head sizes are array
  // bounds below.
  os << "  const int64_t nb = " << sz(nb) << ", L = " << sz(L) << ", S = " << sz(S) << ";\n"
     << "  constexpr int64_t E = " << E << ", D = " << D << ";\n";
  // One region; each thread allocates its buffers once and takes a share of the matrices.
  os << "#pragma omp parallel if (nb > 1 && nb * L * S * (E + D) >= " << cpu::kParallelGrain
     << ")\n"
     << "  {\n";
  const std::vector<int64_t> ost = output_strides(grp);
  const int64_t os_l = ost[nd - 2];
  const int64_t ks_e = k.meta.strides[nd - 2], ks_j = k.meta.strides[nd - 1];
  const int64_t qs_l = q.meta.strides[nd - 2], qs_e = q.meta.strides[nd - 1];
  const int64_t vs_j = v.meta.strides[nd - 2], vs_d = v.meta.strides[nd - 1];
  const std::string sv = var(qk.outputs[0]), x = var(row.inputs[0]);
  // Register tiles: kQB query rows at a time against one vector of W keys (scores) or of W
  // output columns (softmax @ v), so each loaded vector of k or v feeds kQB FMAs. GCC's vector
  // extensions map the tiles onto whatever vector width -march gives.
  const int64_t W = 64 / int64_t(dtype_size(out.meta.dtype));
  // Score rows are padded to SP, whole tiles of kKV vectors (the padding's scores are computed
  // against zero keys and never read).
  // softmax @ v keeps a whole output row tile in registers when D is at most kKV vectors.
  const int64_t DV = D / W;
  const bool vec_pv = D % W == 0 && vs_d == 1 && DV <= kKV;
  os << "    typedef " << T << " vec __attribute__((vector_size(64)));\n"
     << "    typedef " << T << " uvec __attribute__((vector_size(64), aligned("
     << dtype_size(out.meta.dtype) << ")));\n"
     << "    constexpr int64_t W = " << W << ", QB = " << kQB << ", KV = " << kKV << ";\n"
     << "    const int64_t SP = (S + KV * W - 1) / (KV * W) * (KV * W);\n";
  const char* sfx = W == 16 ? "f32" : "f64";
  // k as [E, SP] with unit stride along keys and zeros past S, so score tiles are whole vectors.
  os << "    vec* ktv = static_cast<vec*>(__builtin_assume_aligned(::operator new[](sizeof("
     << T << ") * E * SP, std::align_val_t(64)), 64));\n";
  if (vec_pv)
    os << "    vec* vpv = static_cast<vec*>(__builtin_assume_aligned(::operator new[](sizeof("
       << T << ") * S * D, std::align_val_t(64)), 64));\n";
  // The scores, then probabilities, of QB rows: on the heap, as long sequences would not fit
  // an OpenMP worker's stack.
  os << "    " << T << "* __restrict s = static_cast<" << T << "*>(__builtin_assume_aligned("
     << "::operator new[](sizeof(" << T << ") * QB * SP, std::align_val_t(64)), 64));\n";
  os << "#pragma omp for schedule(static)\n";
  os << "  for (int64_t b = 0; b < nb; ++b) {\n";
  os << "    " << T << "* __restrict ob = out + "
     << batch_offset(grp.attn_pv->outputs[0]->meta.sizes, ost) << ";  // this matrix's output\n";
  os << "    const " << T << "* __restrict qb = qm + " << batch_offset(q) << ";\n"
     << "    const " << T << "* __restrict kb = km + " << batch_offset(k) << ";\n"
     << "    const " << T << "* __restrict vb = vm + " << batch_offset(v) << ";\n";
  os << "    " << T << "* __restrict kt = reinterpret_cast<" << T << "*>(ktv);\n";
  if (ks_j == 1) {  // keys already adjacent: row by row
    os << "    for (int64_t e = 0; e < E; ++e) {\n"
       << "#pragma omp simd\n"
       << "      for (int64_t j = 0; j < S; ++j) kt[e * SP + j] = kb[" << at("e", ks_e) << " + j];\n"
       << "    }\n";
  } else {
    // A transpose, in blocks of 16 keys: the block's rows of k stay in L1 while every e is
    // read from them (15% faster than row by row over all keys, at 256 keys).
    os << "    // k transposed in blocks of 16 keys\n"
       << "    for (int64_t j0 = 0; j0 < S; j0 += 16) {\n"
       << "      const int64_t j1 = j0 + 16 < S ? j0 + 16 : S;\n"
       << "      for (int64_t e = 0; e < E; ++e)\n"
       << "#pragma omp simd\n"
       << "        for (int64_t j = j0; j < j1; ++j) kt[e * SP + j] = kb[" << at("e", ks_e) << " + "
       << at("j", ks_j) << "];\n"
       << "    }\n";
  }
  os << "    for (int64_t e = 0; e < E; ++e)\n"
     << "      for (int64_t j = S; j < SP; ++j) kt[e * SP + j] = " << T << "(0);\n";
  if (vec_pv) {
    // v as [S, D] rows next to each other: the tile's loop over keys then stays in L1.
    os << "    " << T << "* __restrict vp = reinterpret_cast<" << T << "*>(vpv);\n"
       << "    for (int64_t j = 0; j < S; ++j)\n"
       << "#pragma omp simd\n"
       << "      for (int64_t d = 0; d < D; ++d) vp[j * D + d] = vb[" << at("j", vs_j) << " + d];\n";
  }
  os << "    for (int64_t q0 = 0; q0 < L; q0 += QB) {\n"
     << "      const int64_t nq = L - q0 < QB ? L - q0 : QB;\n"
     << "      int64_t jn[QB];  // keys each row reads\n"
     << "      int64_t jmax = 0;\n"
     << "      for (int64_t t = 0; t < QB; ++t) {\n"
     << "        const int64_t qi = q0 + (t < nq ? t : nq - 1);\n";
  if (grp.causal) {
    // Keys j >= qi + diag are -inf in the mask; a fully masked row keeps every key (and gives
    // NaN, as the unfused softmax does).
    os << "        const int64_t lim = qi + (" << grp.causal_diag << ");\n"
       << "        jn[t] = lim < 1 ? S : (lim < S ? lim : S);\n";
  } else {
    os << "        jn[t] = S;\n";
  }
  os << "        (void)qi;\n"
     << "        jmax = jn[t] > jmax ? jn[t] : jmax;\n"
     << "      }\n";
  // Scores of the tile's rows (rows past nq repeat the last one; their results are unused).
  os << "      const " << T << "* qr[QB];\n"
     << "      for (int64_t t = 0; t < QB; ++t) qr[t] = qb + " << at("(q0 + (t < nq ? t : nq - 1))", qs_l) << ";\n"
     << "      const int64_t nvec = (jmax + W - 1) / W;  // vectors of keys the tile reads\n"
     << "      int64_t jb = 0;\n"
     << "      for (; jb + KV <= nvec; jb += KV) {\n"
     << "        vec acc[QB][KV] = {};\n"
     << "        for (int64_t e = 0; e < E; ++e) {\n"
     << "          vec kv[KV];\n"
     << "#pragma GCC unroll 8\n"
     << "          for (int64_t u = 0; u < KV; ++u) kv[u] = ktv[(e * SP) / W + jb + u];\n"
     << "#pragma GCC unroll 8\n"
     << "          for (int64_t t = 0; t < QB; ++t) {\n"
     << "            const " << T << " a = qr[t][" << at("e", qs_e) << "];\n"
     << "#pragma GCC unroll 8\n"
     << "            for (int64_t u = 0; u < KV; ++u) acc[t][u] += a * kv[u];\n"
     << "          }\n"
     << "        }\n"
     << "        for (int64_t t = 0; t < QB; ++t)\n"
     << "          for (int64_t u = 0; u < KV; ++u)\n"
     << "            *reinterpret_cast<vec*>(s + t * SP + (jb + u) * W) = acc[t][u];\n"
     << "      }\n"
     << "      for (; jb < nvec; ++jb) {  // the last vectors one at a time (causal tiles end early)\n"
     << "        vec acc[QB] = {};\n"
     << "        for (int64_t e = 0; e < E; ++e) {\n"
     << "          const vec kv = ktv[(e * SP) / W + jb];\n"
     << "#pragma GCC unroll 8\n"
     << "          for (int64_t t = 0; t < QB; ++t) acc[t] += qr[t][" << at("e", qs_e) << "] * kv;\n"
     << "        }\n"
     << "        for (int64_t t = 0; t < QB; ++t)\n"
     << "          *reinterpret_cast<vec*>(s + t * SP + jb * W) = acc[t];\n"
     << "      }\n";
  // The tile's rows, each stage over all of them before the next, so that the rows' chains of
  // dependent operations overlap: the fused producers (-inf past a row's keys, so whole
  // vectors up to the tile's last key can be read), each row's max, the exponentials of the
  // tile in one loop, each row's sum. Rows past nq hold stale values here; they are zeroed
  // before softmax @ v.
  os << "      const int64_t nvt = (jmax + W - 1) / W * W;  // whole vectors of the tile's keys\n"
     << "      for (int64_t t = 0; t < nq; ++t) {\n"
     << "        const int64_t r = b * L + q0 + t;  // the scores row\n"
     << "        " << T << "* __restrict st = s + t * SP;\n"
     << "        const int64_t n = jn[t];\n";
  const std::vector<std::string> idx = emit_row_bases(os, grp, ps, "        ");
  // Past n the row value is -inf (its exponential 0), and reads of the group inputs use column
  // 0 there, which is always in bounds.
  const std::string ninf = "-std::numeric_limits<" + std::string(T) + ">::infinity()";
  os << "#pragma omp simd\n"
     << "        for (int64_t jj = 0; jj < nvt; ++jj) {\n"
     << "          const int64_t j = jj < n ? jj : 0;\n"
     << "          const " << T << " " << sv << " = st[j];\n";
  emit_elementwise(os, grp, pre, idx, T, "          ");
  os << "          st[jj] = jj < n ? " << x << " : " << ninf << ";\n"
     << "        }\n"
     << "      }\n"
     << "      " << T << " mx[QB], inv[QB];\n";
  // Row t's vectors up to nvt folded into one (`fold` combines a and y), then reduced across
  // lanes by ember_h<op>; `out` takes the result.
  auto row_reduce = [&](const char* op, const char* fold, const std::string& out) {
    os << "        vec a = *reinterpret_cast<const vec*>(s + t * SP);\n"
       << "        for (int64_t c = W; c < nvt; c += W) {\n"
       << "          const vec y = *reinterpret_cast<const vec*>(s + t * SP + c);\n"
       << "          " << fold << ";\n"
       << "        }\n"
       << "        " << out << "ember_h" << op << "_" << sfx << "(a);\n";
  };
  os << "      for (int64_t t = nq; t < QB; ++t) mx[t] = " << T << "(0);\n"
     << "      for (int64_t t = 0; t < nq; ++t) {\n";
  row_reduce("max", "a = a < y ? y : a", "mx[t] = ");
  os << "      }\n"
     << "#pragma omp simd\n"
     << "      for (int64_t j = 0; j < nvt; ++j) {\n"
     << "#pragma GCC unroll 8\n"
     << "        for (int64_t t = 0; t < QB; ++t)\n"
     << "          s[t * SP + j] = ember::fn::ExpFtz{}(s[t * SP + j] - mx[t]);\n"
     << "      }\n"
     << "      for (int64_t t = 0; t < nq; ++t) {\n";
  row_reduce("sum", "a += y", "inv[t] = " + std::string(T) + "(1) / ");
  os << "      }\n"
     << "      for (int64_t t = nq; t < QB; ++t)\n"
     << "        for (int64_t j = 0; j < jmax; ++j) s[t * SP + j] = " << T << "(0);\n";
  if (probs_out) {
    // Normalized, and zero for the keys past the tile (the causal skip never computed them).
    os << "      for (int64_t t = 0; t < nq; ++t) {\n"
       << "        " << T << "* __restrict pr = pm + (b * L + q0 + t) * S;\n"
       << "        const int64_t nw = nvt < S ? nvt : S;\n"
       << "#pragma omp simd\n"
       << "        for (int64_t j = 0; j < nw; ++j) pr[j] = s[t * SP + j] * inv[t];\n"
       << "        for (int64_t j = nw; j < S; ++j) pr[j] = " << T << "(0);\n"
       << "      }\n";
  }
  if (vec_pv) {
    os << "      {\n"
       << "        constexpr int64_t DV = " << DV << ";\n"
       << "        vec acc[QB][DV] = {};\n"
       << "        for (int64_t j = 0; j < jmax; ++j) {\n"
       << "          vec vv[DV];\n"
       << "#pragma GCC unroll 8\n"
       << "          for (int64_t u = 0; u < DV; ++u) vv[u] = vpv[(j * D) / W + u];\n"
       << "#pragma GCC unroll 8\n"
       << "          for (int64_t t = 0; t < QB; ++t) {\n"
       << "            const " << T << " p = s[t * SP + j];\n"
       << "#pragma GCC unroll 8\n"
       << "            for (int64_t u = 0; u < DV; ++u) acc[t][u] += p * vv[u];\n"
       << "          }\n"
       << "        }\n"
       << "        for (int64_t t = 0; t < nq; ++t)\n"
       << "          for (int64_t u = 0; u < DV; ++u)\n"
       << "            *reinterpret_cast<uvec*>(ob + " << at("(q0 + t)", os_l)
       << " + u * W) = acc[t][u] * inv[t];\n"
       << "      }\n";
  } else {
    os << "      for (int64_t t = 0; t < nq; ++t) {\n"
       << "        alignas(64) " << T << " y[D] = {};\n"
       << "        for (int64_t j = 0; j < jmax; ++j) {\n"
       << "          const " << T << " p = s[t * SP + j];\n"
       << "          const " << T << "* __restrict vr = vb + " << at("j", vs_j) << ";\n"
       << "#pragma omp simd\n"
       << "          for (int64_t d = 0; d < D; ++d) y[d] += p * vr[" << at("d", vs_d) << "];\n"
       << "        }\n"
       << "        " << T << "* __restrict o = ob + " << at("(q0 + t)", os_l) << ";\n"
       << "#pragma omp simd\n"
       << "        for (int64_t d = 0; d < D; ++d) o[d] = y[d] * inv[t];\n"
       << "      }\n";
  }
  os << "    }\n"
     << "  }\n"
     << "    ::operator delete[](ktv, std::align_val_t(64));\n"
     << "    ::operator delete[](s, std::align_val_t(64));\n"
     << (vec_pv ? "    ::operator delete[](vpv, std::align_val_t(64));\n" : "")
     << "  }\n}\n\n";
}

}  // namespace ember::compiler
