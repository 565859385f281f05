// Shape helpers.
#include "core/shape.h"

#include "ember/error.h"

namespace ember {

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = ndim == 0 ? 1 : ndim;  // a 0-dim tensor accepts dim 0 and -1, as in PyTorch
  EMBER_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " is out of range for a tensor of ",
              ndim, " dims (expected in [", -n, ", ", n - 1, "])");
  return dim < 0 ? dim + n : dim;
}

Shape broadcast_pair(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    EMBER_CHECK(x == y || x == 1 || y == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
                " cannot be broadcast together (dim ", i, ": ", x, " vs ", y, ")");
    out[i] = x == 1 ? y : x;
  }
  checked_numel(out, op);
  return out;
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

bool size_mul(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
bool size_add(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

namespace {
// The product of the nonzero sizes (the outermost contiguous stride), or -1 when it does not
// fit; throws on a negative size.
int64_t nonzero_product(const Shape& sizes, const char* op) {
  int64_t n = 1;
  bool fits = true;
  for (int64_t s : sizes) {
    EMBER_CHECK(s >= 0, op, ": negative size ", s, " in shape ", shape_str(sizes),
                "; sizes must be >= 0");
    if (s != 0 && fits) fits = size_mul(n, s, &n);
  }
  return fits ? n : -1;
}
}  // namespace

int64_t checked_numel(const Shape& sizes, const char* op) {
  const int64_t n = nonzero_product(sizes, op);
  EMBER_CHECK(n >= 0, op, ": shape ", shape_str(sizes),
              " has too many elements: the product of its sizes does not fit in int64 (at most ",
              kMaxSize, "); use smaller sizes");
  for (int64_t s : sizes)
    if (s == 0) return 0;
  return n;
}

int64_t checked_nbytes(const Shape& sizes, DType dtype, const char* op) {
  const int64_t n = nonzero_product(sizes, op);
  int64_t bytes = 0;
  EMBER_CHECK(n >= 0 && size_mul(n, int64_t(dtype_size(dtype)), &bytes), op, ": shape ",
              shape_str(sizes), " of ", dtype_name(dtype), " has too many elements: ",
              n >= 0 ? std::to_string(n) + " elements of " + std::to_string(dtype_size(dtype)) +
                           " bytes need more"
                     : std::string("the product of its sizes needs more"),
              " than the limit of ", kMaxSize, " bytes (int64); use smaller sizes");
  for (int64_t s : sizes)
    if (s == 0) return 0;
  return bytes;
}

}  // namespace ember
