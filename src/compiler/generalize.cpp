// Fitting kernels over samples (generalize.h): per integer of the kernel's form, the
// coefficients of the monomials s0^e0 s1^e1 ... (each e at most 2) by least squares over the
// samples, rounded to integers, then checked exactly on every sample.
#include "compiler/generalize.h"

#include <algorithm>
#include <cmath>

namespace ember::compiler {

namespace {

using kir::Index;

// Exponent tuples of the monomials, symbol s's exponent 0..degree[s].
std::vector<std::vector<int>> monomials(const std::vector<int>& degree) {
  const size_t symbols = degree.size();
  std::vector<std::vector<int>> out(1, std::vector<int>(symbols, 0));
  for (size_t s = 0; s < symbols; ++s) {
    std::vector<std::vector<int>> next;
    for (const auto& m : out)
      for (int e = 0; e <= degree[s]; ++e) {
        std::vector<int> x = m;
        x[s] = e;
        next.push_back(x);
      }
    out = std::move(next);
  }
  return out;
}

long double power(int64_t v, int e) {
  long double r = 1;
  for (int k = 0; k < e; ++k) r *= (long double)v;
  return r;
}

// Solves the normal equations (A^T A) x = A^T b with partial pivoting; false when singular.
bool least_squares(const std::vector<std::vector<long double>>& a,
                   const std::vector<long double>& b, std::vector<long double>& x) {
  const size_t n = a.front().size();
  std::vector<std::vector<long double>> m(n, std::vector<long double>(n + 1, 0));
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t r = 0; r < n; ++r) {
      for (size_t c = 0; c < n; ++c) m[r][c] += a[i][r] * a[i][c];
      m[r][n] += a[i][r] * b[i];
    }
  for (size_t col = 0; col < n; ++col) {
    size_t pivot = col;
    for (size_t r = col + 1; r < n; ++r)
      if (std::fabs(m[r][col]) > std::fabs(m[pivot][col])) pivot = r;
    if (std::fabs(m[pivot][col]) < 1e-9L) return false;
    std::swap(m[pivot], m[col]);
    for (size_t r = 0; r < n; ++r) {
      if (r == col) continue;
      const long double f = m[r][col] / m[col][col];
      for (size_t c = col; c <= n; ++c) m[r][c] -= f * m[col][c];
    }
  }
  x.assign(n, 0);
  for (size_t r = 0; r < n; ++r) x[r] = m[r][n] / m[r][r];
  return true;
}

}  // namespace

std::optional<kir::Kernel> generalize(const std::vector<KernelSample>& samples) {
  if (samples.empty()) return std::nullopt;
  const kir::Kernel& first = samples.front().kernel;
  const size_t symbols = samples.front().sizes.size();
  const std::string shape = kir::form(first);
  std::vector<std::vector<int64_t>> ints;
  for (const KernelSample& s : samples) {
    if (s.sizes.size() != symbols || kir::form(s.kernel) != shape) return std::nullopt;
    ints.push_back(kir::integers(s.kernel));
  }
  // Each symbol's degree: one less than the distinct values it takes in the samples, at most 2
  // (two values fit a line, three a parabola). A symbol with one value is no symbol here.
  std::vector<int> degree(symbols);
  for (size_t s = 0; s < symbols; ++s) {
    std::vector<int64_t> seen;
    for (const KernelSample& x : samples)
      if (std::find(seen.begin(), seen.end(), x.sizes[s]) == seen.end()) seen.push_back(x.sizes[s]);
    if (seen.size() < 2) return std::nullopt;
    degree[s] = int(std::min<size_t>(seen.size() - 1, 2));
  }
  // Fewer samples than unknowns: refused before the monomials are listed (there are
  // prod(degree + 1) of them, too many to list for many symbols).
  size_t unknowns = 1;
  for (int d : degree) {
    unknowns *= size_t(d + 1);
    if (unknowns > samples.size()) return std::nullopt;
  }
  const std::vector<std::vector<int>> monos = monomials(degree);
  // The design matrix, scaled per column so that the normal equations stay well conditioned.
  std::vector<std::vector<long double>> a(samples.size(), std::vector<long double>(monos.size()));
  std::vector<long double> scale(monos.size(), 0);
  for (size_t i = 0; i < samples.size(); ++i)
    for (size_t m = 0; m < monos.size(); ++m) {
      long double v = 1;
      for (size_t s = 0; s < symbols; ++s) v *= power(samples[i].sizes[s], monos[m][s]);
      a[i][m] = v;
      scale[m] = std::max(scale[m], std::fabs(v));
    }
  for (auto& row : a)
    for (size_t m = 0; m < monos.size(); ++m) row[m] /= scale[m] > 0 ? scale[m] : 1;
  std::vector<Index> fitted;
  for (size_t k = 0; k < ints.front().size(); ++k) {
    std::vector<long double> b(samples.size());
    bool same = true;
    for (size_t i = 0; i < samples.size(); ++i) {
      b[i] = (long double)ints[i][k];
      same &= ints[i][k] == ints[0][k];
    }
    if (same) {  // a constant: no fit needed
      fitted.push_back(ints[0][k]);
      continue;
    }
    std::vector<long double> x;
    if (!least_squares(a, b, x)) return std::nullopt;
    Index e = 0;
    for (size_t m = 0; m < monos.size(); ++m) {
      const long double c = x[m] / (scale[m] > 0 ? scale[m] : 1);
      const long double r = std::round(c);
      if (std::fabs(c - r) > 1e-6L * std::max<long double>(1, std::fabs(c))) return std::nullopt;
      if (r == 0) continue;
      Index term = int64_t(r);
      for (size_t s = 0; s < symbols; ++s)
        for (int p = 0; p < monos[m][s]; ++p) term = term * Index::symbol(int(s));
      e = e + term;
    }
    fitted.push_back(e);
  }
  kir::Kernel out = kir::with_integers(first, fitted);
  // Exactly every sample, or nothing.
  for (size_t i = 0; i < samples.size(); ++i) {
    const kir::Kernel bound = kir::bind(out, samples[i].sizes);
    if (kir::form(bound) != shape || kir::integers(bound) != ints[i]) return std::nullopt;
  }
  return out;
}

}  // namespace ember::compiler
