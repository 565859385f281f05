// The layer_norm backward kernel (FusionGroup::ln_bwd). Each thread takes a contiguous block
// of rows and makes two passes over each row while it is in cache: the sums of gw = g * w and
// of gw * xhat, then dx = rstd * ((gw - mean(gw)) - xhat * mean(gw * xhat)) (plus r when dx is
// added to another grad). xhat = (x - mean) * rstd is recomputed in both passes rather than
// stored. The weight and bias grads (column sums of g * xhat and of g) are summed per thread
// in blocks of 32 rows, the blocks added to the thread's total, and the threads' totals added in
// thread order: no sum runs over more than 32 terms before meeting a total, as in the column
// kernels.
#include "compiler/codegen_util.h"
#include "graph/graph_util.h"
#include "kernels/cpu/loops.h"

namespace ember::compiler {

void emit_layer_norm_backward_kernel(std::ostringstream& os, const std::string& name,
                                     const FusionGroup& grp) {
  const FusionGroup::LayerNormBackward& lb = *grp.ln_bwd;
  const char* T = c_type(lb.x->meta.dtype);
  const int64_t C = lb.x->meta.sizes.back();
  const int64_t R = shape_numel(lb.x->meta.sizes) / C;
  const size_t nin = grp.inputs.size();
  auto slot = [&](const graph::Node* n) {
    const graph::Value* v = n->outputs[0];
    if (v == grp.output) return nin;
    for (size_t e = 0; e < grp.extra_outputs.size(); ++e)
      if (grp.extra_outputs[e] == v) return nin + 1 + e;
    return size_t(0);
  };
  const bool sums = lb.dw || lb.db;
  const graph::Node* dxn = lb.add ? lb.add : lb.dx;
  os << "// " << name << ": layer_norm backward over " << R << " rows of " << C << "; fuses\n";
  for (const graph::Node* n : grp.nodes) os << "//   " << node_str(*n) << "\n";
  os << "extern \"C\" void " << name << "(void* const* args) {\n";
  const char* in_names[6] = {"x", "mean", "rstd", "g", "w", "r"};
  for (size_t i = 0; i < nin; ++i)
    os << "  const " << T << "* __restrict " << in_names[i] << " = static_cast<const " << T
       << "*>(args[" << i << "]);  // " << value_type_str(*grp.inputs[i]) << "\n";
  os << "  " << T << "* __restrict dx = static_cast<" << T << "*>(args[" << slot(dxn) << "]);  // "
     << value_type_str(*dxn->outputs[0]) << "\n";
  if (lb.dw)
    os << "  " << T << "* __restrict dw = static_cast<" << T << "*>(args[" << slot(lb.dw)
       << "]);\n";
  if (lb.db)
    os << "  " << T << "* __restrict db = static_cast<" << T << "*>(args[" << slot(lb.db)
       << "]);\n";
  // The row count may be symbolic (kir::Pattern); C bounds the block arrays.
  os << "  const int64_t R = " << sz(R) << ";\n"
     << "  constexpr int64_t C = " << C << ";\n"
     << "  const int nmax = omp_get_max_threads();\n";
  if (sums)
    os << "  " << T << "* part = static_cast<" << T << "*>(::operator new(sizeof(" << T
       << ") * 2 * C * nmax, std::align_val_t(64)));\n";
  os << "#pragma omp parallel num_threads(nmax) if (R * C >= " << cpu::kParallelGrain
     << " && R > 1)\n"
     << "  {\n"
     << "    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();\n"
     << "    const int64_t r0 = R * tid / nt, r1 = R * (tid + 1) / nt;\n";
  if (sums)
    os << "    " << T << "* __restrict tw = part + 2 * C * tid;  // the thread's totals\n"
       << "    " << T << "* __restrict tb = tw + C;\n"
       << "    alignas(64) " << T << " bw[C], bb[C];  // the current block of rows\n"
       << "    for (int64_t j = 0; j < C; ++j) tw[j] = tb[j] = bw[j] = bb[j] = 0;\n";
  os << "    for (int64_t row = r0; row < r1; ++row) {\n"
     << "      const " << T << "* __restrict xr = x + row * C;\n"
     << "      const " << T << "* __restrict gr = g + row * C;\n"
     << (lb.r ? std::string("      const ") + T + "* __restrict rr = r + row * C;\n" : "")
     << "      " << T << "* __restrict dr = dx + row * C;\n"
     << "      const " << T << " m = mean[row], rs = rstd[row];\n"
     << "      " << T << " s1 = 0, s2 = 0;\n"
     << "#pragma omp simd reduction(+ : s1, s2)\n"
     << "      for (int64_t j = 0; j < C; ++j) {\n"
     << "        const " << T << " xh = (xr[j] - m) * rs, gw = gr[j] * w[j];\n"
     << "        s1 += gw;\n"
     << "        s2 += gw * xh;\n"
     << "      }\n"
     << "      const " << T << " m1 = s1 / " << T << "(C), m2 = s2 / " << T << "(C);\n"
     << "#pragma omp simd\n"
     << "      for (int64_t j = 0; j < C; ++j) {\n"
     << "        const " << T << " xh = (xr[j] - m) * rs, gw = gr[j] * w[j];\n"
     << "        const " << T << " d = rs * ((gw - m1) - xh * m2);\n"
     << "        dr[j] = " << (lb.r ? "rr[j] + d" : "d") << ";\n"
     << (lb.dw ? "        bw[j] += gr[j] * xh;\n" : "")
     << (lb.db ? "        bb[j] += gr[j];\n" : "") << "      }\n";
  if (sums)
    os << "      if ((row - r0) % 32 == 31 || row + 1 == r1)\n"
       << "        for (int64_t j = 0; j < C; ++j) {\n"
       << "          tw[j] += bw[j];\n"
       << "          tb[j] += bb[j];\n"
       << "          bw[j] = bb[j] = 0;\n"
       << "        }\n";
  os << "    }\n";
  if (sums)
    os << "#pragma omp barrier\n"
       << "#pragma omp for schedule(static)\n"
       << "    for (int64_t j = 0; j < C; ++j) {\n"
       << "      " << T << " sw = 0, sb = 0;\n"
       << "      for (int t = 0; t < nt; ++t) {\n"
       << "        sw += part[2 * C * t + j];\n"
       << "        sb += part[2 * C * t + C + j];\n"
       << "      }\n"
       << (lb.dw ? "      dw[j] = sw;\n" : "") << (lb.db ? "      db[j] = sb;\n" : "")
       << (lb.dw ? "" : "      (void)sw;\n") << (lb.db ? "" : "      (void)sb;\n") << "    }\n";
  os << "  }\n";
  if (sums) os << "  ::operator delete(part, std::align_val_t(64));\n";
  os << "}\n\n";
}

}  // namespace ember::compiler
