// The column kernel: a sum or mean over every dim but the last of a contiguous tensor, viewed
// as [R, C] (a bias grad: the rows are the batch and sequence positions). Threads take blocks
// of 64 columns, whole vectors of columns at a time.
#include "compiler/codegen_util.h"
#include "graph/graph_util.h"
#include "kernels/cpu/loops.h"

namespace ember::compiler {

void emit_column_kernel(std::ostringstream& os, const std::string& name, const FusionGroup& grp) {
  const graph::Node& n = *grp.col;
  const graph::Value& x = *n.inputs[0];
  const char* T = c_type(x.meta.dtype);
  const int64_t C = x.meta.sizes.back();
  const int64_t R = shape_numel(x.meta.sizes) / C;
  constexpr int64_t kBlock = 64;
  os << "// " << name << ": column " << (n.op == OpId::mean ? "means" : "sums") << " of "
     << value_type_str(x) << " as [" << R << ", " << C << "]\n"
     << "//   " << node_str(n) << "\n"
     << "extern \"C\" void " << name << "(void* const* args) {\n"
     << "  const " << T << "* __restrict in = static_cast<const " << T << "*>(args[0]);  // "
     << var(&x) << "\n"
     << "  " << T << "* __restrict out = static_cast<" << T << "*>(args[1]);  // "
     << var(grp.output) << "\n"
     << "  const int64_t R = " << sz(R) << ", C = " << sz(C) << ";\n"
     << "  constexpr int64_t CB = " << kBlock << ";\n"
     << "#pragma omp parallel for schedule(static) if (C > CB && R * C >= " << cpu::kParallelGrain
     << ")\n";
  // Blocks of 32 rows are summed on their own (two accumulators, even and odd rows) and then
  // added to the column totals: no sum runs over more than 32 terms before it meets a total,
  // which keeps the rounding error near a pairwise sum's.
  os << "  for (int64_t c0 = 0; c0 < C; c0 += CB) {\n"
     << "    const int64_t cn = C - c0 < CB ? C - c0 : CB;\n"
     << "    alignas(64) " << T << " total[CB] = {};\n"
     << "    for (int64_t r0 = 0; r0 < R; r0 += 32) {\n"
     << "      const int64_t r1 = R - r0 < 32 ? R : r0 + 32;\n"
     << "      alignas(64) " << T << " even[CB] = {}, odd[CB] = {};\n"
     << "      int64_t r = r0;\n"
     << "      for (; r + 1 < r1; r += 2) {\n"
     << "        const " << T << "* __restrict a = in + r * C + c0;\n"
     << "#pragma omp simd\n"
     << "        for (int64_t j = 0; j < cn; ++j) {\n"
     << "          even[j] += a[j];\n"
     << "          odd[j] += a[C + j];\n"
     << "        }\n"
     << "      }\n"
     << "      if (r < r1)\n"
     << "#pragma omp simd\n"
     << "        for (int64_t j = 0; j < cn; ++j) even[j] += in[r * C + c0 + j];\n"
     << "#pragma omp simd\n"
     << "      for (int64_t j = 0; j < cn; ++j) total[j] += even[j] + odd[j];\n"
     << "    }\n"
     << "#pragma omp simd\n"
     << "    for (int64_t j = 0; j < cn; ++j) out[c0 + j] = ";
  if (n.op == OpId::mean)
    os << "total[j] / " << T << "(R);\n";
  else
    os << "total[j];\n";
  os << "  }\n}\n\n";
}

}  // namespace ember::compiler
