// Printing tensors, PyTorch style.
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "core/shape.h"
#include "ember/autograd.h"
#include "ember/tensor.h"

namespace ember {

namespace {
constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Printer {
  const std::vector<double>& vals;
  const Shape& sizes;
  bool floating;
  bool sci;
  bool all_int;
  bool summarize;
  std::ostream& os;

  std::string fmt(double v) const {
    char buf[64];
    if (!floating) {
      std::snprintf(buf, sizeof buf, "%lld", (long long)v);
    } else if (std::isnan(v)) {
      return "nan";
    } else if (std::isinf(v)) {
      return v > 0 ? "inf" : "-inf";
    } else if (sci) {
      std::snprintf(buf, sizeof buf, "%.4e", v);
    } else if (all_int) {
      std::snprintf(buf, sizeof buf, "%.0f.", v);
    } else {
      std::snprintf(buf, sizeof buf, "%.4f", v);
    }
    return buf;
  }

  void rec(size_t d, int64_t offset, int64_t stride_prod, int indent) {
    if (d == sizes.size()) {
      os << fmt(vals[offset]);
      return;
    }
    int64_t n = sizes[d];
    int64_t inner = stride_prod / (n == 0 ? 1 : n);
    os << "[";
    for (int64_t i = 0; i < n; ++i) {
      if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
        os << "...";
        i = n - kEdgeItems - 1;
        os << (d + 1 == sizes.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
        continue;
      }
      rec(d + 1, offset + i * inner, inner, indent + 1);
      if (i + 1 < n) os << (d + 1 == sizes.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
    }
    os << "]";
  }
};
}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  if (t.is_symbolic())
    return os << "tensor(symbolic, shape=" << t.shape_str() << ", dtype=" << dtype_name(t.dtype())
              << ")";
  std::vector<double> vals = t.to_vector<double>();
  bool floating = is_floating(t.dtype());
  double maxabs = 0, minabs = INFINITY;
  bool all_int = true;
  for (double v : vals) {
    if (!std::isfinite(v)) continue;
    maxabs = std::max(maxabs, std::abs(v));
    if (v != 0) minabs = std::min(minabs, std::abs(v));
    all_int &= std::nearbyint(v) == v;
  }
  bool sci = floating && (maxabs >= 1e8 || (minabs < 1e-4 && !all_int));
  Printer p{vals, t.sizes(), floating, sci, all_int, t.numel() > kSummarizeAbove, os};
  os << "tensor(";
  if (t.dtype() == DType::Bool) {
    Printer b = p;
    b.floating = false;
    std::ostringstream tmp;
    Printer q{vals, t.sizes(), false, false, true, p.summarize, tmp};
    q.rec(0, 0, t.numel(), 7);
    std::string s = tmp.str();
    // 0/1 -> False/True
    std::string out;
    for (char c : s) out += c == '1' ? "True" : c == '0' ? "False" : std::string(1, c);
    os << out;
  } else {
    p.rec(0, 0, t.numel(), 7);
  }
  if (t.dtype() != DType::Float32 && t.dtype() != DType::Int64) os << ", dtype=" << dtype_name(t.dtype());
  if (t.requires_grad()) os << (t.is_leaf() ? ", requires_grad=True" : ", grad_fn=<backward>");
  return os << ")";
}

std::string to_string(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace ember
