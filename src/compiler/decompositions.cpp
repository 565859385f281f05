// The row decompositions (see decompositions.h). Max-subtracted softmaxes (no overflow), and
// layer_norm's variance around the mean in a second pass (no cancellation), as the eager
// kernels compute them.
#include "compiler/decompositions.h"

#include <cstdio>

namespace ember::compiler {

std::optional<RowDecomposition> row_decomposition(const graph::Node& n) {
  using K = RowStep::Kind;
  RowDecomposition d;
  switch (n.op) {
    case OpId::softmax:
      // The exponentials are kept in the row: the last pass only scales them.
      d.steps = {{K::Max, "mx", "$x"},
                 {K::Sum, "sum", "ember::fn::ExpFtz{}($x - mx)", true},
                 {K::Let, "inv", "$T(1) / sum"}};
      d.out = "$kept * inv";
      return d;
    case OpId::log_softmax:
      // (x - max) - log(sum), not x - (max + log(sum)), which loses small results.
      d.steps = {{K::Max, "mx", "$x"},
                 {K::Sum, "sum", "ember::fn::ExpFtz{}($x - mx)"},
                 {K::Let, "lse", "ember::fn::Log{}(sum)"}};
      d.out = "($x - mx) - lse";
      return d;
    case OpId::layer_norm: {
      char eps[40];
      std::snprintf(eps, sizeof eps, "%.17g", n.attrs.value);
      d.steps = {{K::Sum, "sx", "$x"},
                 {K::Let, "mu", "sx / $T($n)"},
                 {K::Sum, "sq", "($x - mu) * ($x - mu)"},
                 {K::Let, "rs", "$T(1) / ember::fn::Sqrt{}(sq / $T($n) + $T(" + std::string(eps) + "))"}};
      d.out = "($x - mu) * rs";
      if (n.inputs.size() > 1) {
        d.out += " * $w";
        d.row_vectors.push_back({"$w", 1});
      }
      if (n.inputs.size() > 2) {
        d.out += " + $b";
        d.row_vectors.push_back({"$b", 2});
      }
      d.stat_outputs = {{1, "mu"}, {2, "rs"}};
      return d;
    }
    case OpId::sum:  // over the last dim (can_fuse_row checks): one value per row
      d.steps = {{K::Sum, "s", "$x"}};
      d.out = "s";
      return d;
    case OpId::mean:
      d.steps = {{K::Sum, "s", "$x"}, {K::Let, "m", "s / $T($n)"}};
      d.out = "m";
      return d;
    default:
      return std::nullopt;
  }
}

}  // namespace ember::compiler
