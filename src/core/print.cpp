// Printing tensors, PyTorch style: one number format for the whole tensor (integer, fixed
// with 4 decimals, or scientific), elements right-aligned to a common width, long rows
// wrapped at 80 columns, and large tensors summarized by their first and last 3 entries.
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "autograd/node.h"
#include "core/shape.h"
#include "dispatch/dispatcher.h"
#include "ember/autograd.h"
#include "ember/tensor.h"

namespace ember {

namespace {
constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr size_t kLineWidth = 80;

// The indices printed along a dim of size n: all, or the edges around a gap (-1).
std::vector<int64_t> shown(int64_t n, bool summarize) {
  std::vector<int64_t> idx;
  bool cut = summarize && n > 2 * kEdgeItems;
  for (int64_t i = 0; i < n; ++i) {
    if (cut && i == kEdgeItems) {
      idx.push_back(-1);
      i = n - kEdgeItems - 1;
      continue;
    }
    idx.push_back(i);
  }
  return idx;
}

class Printer {
 public:
  Printer(const Tensor& t, bool summarize) : sizes_(t.sizes()), summarize_(summarize) {
    kind_ = t.dtype() == DType::Bool ? Kind::Bool
            : is_floating(t.dtype()) ? Kind::Float
                                     : Kind::Int;
    // Integers are read as int64 so that values beyond 2^53 print exactly.
    if (kind_ == Kind::Float)
      floats_ = t.to_vector<double>();
    else
      ints_ = t.to_vector<int64_t>();
    choose_format();
  }

  std::string str() const { return sizes_.empty() ? element(0) : rec(0, 0, 7); }

 private:
  enum class Kind { Bool, Int, Float };
  enum class FloatMode { Integral, Fixed, Sci };

  // Flat indices of the elements that will be shown.
  void collect(size_t d, int64_t base, std::vector<int64_t>& out) const {
    if (d == sizes_.size()) {
      out.push_back(base);
      return;
    }
    int64_t inner = 1;
    for (size_t k = d + 1; k < sizes_.size(); ++k) inner *= sizes_[k];
    for (int64_t i : shown(sizes_[d], summarize_))
      if (i >= 0) collect(d + 1, base + i * inner, out);
  }

  // PyTorch's rule: integral values print as "3."; scientific notation when the magnitudes
  // span more than 1000x, exceed 1e8, or (non-integral) go below 1e-4.
  void choose_format() {
    std::vector<int64_t> idx;
    collect(0, 0, idx);
    if (kind_ == Kind::Float) {
      bool integral = true;
      double lo = INFINITY, hi = 0;
      for (int64_t i : idx) {
        double v = floats_[size_t(i)];
        if (!std::isfinite(v)) continue;
        integral &= std::ceil(v) == v;
        if (v != 0) {
          lo = std::min(lo, std::abs(v));
          hi = std::max(hi, std::abs(v));
        }
      }
      bool any = hi > 0;
      bool spread = any && (hi / lo > 1000 || hi > 1e8);
      mode_ = integral ? (spread ? FloatMode::Sci : FloatMode::Integral)
                       : (spread || (any && lo < 1e-4) ? FloatMode::Sci : FloatMode::Fixed);
    }
    width_ = 0;
    for (int64_t i : idx) width_ = std::max(width_, raw(i).size());
  }

  std::string raw(int64_t i) const {
    if (kind_ == Kind::Bool) return ints_[size_t(i)] ? "True" : "False";
    if (kind_ == Kind::Int) return std::to_string(ints_[size_t(i)]);
    double v = floats_[size_t(i)];
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    char buf[64];
    switch (mode_) {
      case FloatMode::Integral:
        std::snprintf(buf, sizeof buf, "%.0f.", v);
        break;
      case FloatMode::Fixed:
        std::snprintf(buf, sizeof buf, "%.4f", v);
        break;
      case FloatMode::Sci:
        std::snprintf(buf, sizeof buf, "%.4e", v);
        break;
    }
    return buf;
  }
  std::string element(int64_t i) const {
    std::string s = raw(i);
    if (s.size() < width_) s.insert(0, width_ - s.size(), ' ');
    return s;
  }

  // Dim d of the tensor starting at flat index base, printed at column `indent`.
  std::string rec(size_t d, int64_t base, size_t indent) const {
    int64_t inner = 1;
    for (size_t k = d + 1; k < sizes_.size(); ++k) inner *= sizes_[k];
    std::vector<std::string> items;
    for (int64_t i : shown(sizes_[d], summarize_)) {
      bool last_dim = d + 1 == sizes_.size();
      if (i < 0)
        items.push_back(last_dim ? " ..." : "...");
      else
        items.push_back(last_dim ? element(base + i) : rec(d + 1, base + i * inner, indent + 1));
    }
    std::string out = "[";
    if (d + 1 == sizes_.size()) {
      // A row: as many elements per line as fit in the line width.
      size_t per_line =
          std::max<size_t>(1, (kLineWidth - std::min(kLineWidth, indent)) / (width_ + 2));
      for (size_t k = 0; k < items.size(); ++k) {
        if (k > 0 && k % per_line == 0) {
          out += ",\n";
          out.append(indent + 1, ' ');
        } else if (k > 0) {
          out += ", ";
        }
        out += items[k];
      }
    } else {
      // Sub-tensors of k dims are separated by k - 1 line breaks.
      std::string sep(1, ',');
      sep.append(sizes_.size() - d - 1, '\n');
      sep.append(indent + 1, ' ');
      for (size_t k = 0; k < items.size(); ++k) {
        if (k > 0) out += sep;
        out += items[k];
      }
    }
    return out + "]";
  }

  Shape sizes_;
  bool summarize_;
  Kind kind_;
  FloatMode mode_ = FloatMode::Fixed;
  std::vector<double> floats_;
  std::vector<int64_t> ints_;
  size_t width_ = 0;
};

std::string size_tuple(const Shape& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}
}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  // Under capture, printing needs the values: a graph break makes the tensor real.
  if (t.is_symbolic() && capture_hook()) sync_for_host_read(t, "printing a tensor");
  if (t.is_symbolic())
    return os << "tensor(symbolic, shape=" << t.shape_str() << ", dtype=" << dtype_name(t.dtype())
              << ")";
  os << "tensor(";
  if (t.numel() == 0) {
    os << "[]";
    if (t.dim() != 1) os << ", size=" << size_tuple(t.sizes());
  } else {
    // Values on a GPU are printed from a copy (a sync point).
    const Tensor host = t.device() == kCPU ? t : t.detach().cpu();
    os << Printer(host, t.numel() > kSummarizeAbove).str();
  }
  if (t.device() != kCPU) os << ", device='" << t.device().str() << "'";
  DType d = t.dtype();
  if (d != default_float_dtype() && d != DType::Int64 && d != DType::Bool)
    os << ", dtype=" << dtype_name(d);
  if (t.requires_grad()) {
    if (t.is_leaf())
      os << ", requires_grad=True";
    else
      os << ", grad_fn=<" << t.grad_fn()->name() << ">";
  }
  return os << ")";
}

std::string to_string(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace ember
