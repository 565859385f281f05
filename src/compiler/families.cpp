// The family registry (families.h): samples by form, and the fitted kernels once they exist.
#include "compiler/families.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>

#include "compiler/generalize.h"

namespace ember::compiler {

namespace {

struct Family {
  std::vector<std::pair<std::vector<int64_t>, std::vector<kir::Kernel>>> samples;
  std::optional<std::vector<kir::Kernel>> symbolic;
};

// Samples kept per family: enough for a quadratic fit in two symbols with room to spare.
constexpr size_t kMaxSamples = 12;

struct Registry {
  std::mutex mu;
  std::map<std::string, Family> families;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: compiled graphs may outlive statics
  return *r;
}

bool reproduces(const std::vector<kir::Kernel>& symbolic, const std::vector<kir::Kernel>& lowered,
                const std::vector<int64_t>& dims) {
  for (size_t k = 0; k < symbolic.size(); ++k) {
    const kir::Kernel bound = kir::bind(symbolic[k], dims);
    if (kir::form(bound) != kir::form(lowered[k]) ||
        kir::integers(bound) != kir::integers(lowered[k]))
      return false;
  }
  return true;
}

// Whether y[i] = a * x[i] + b for every i, for some integers a and b (x varies).
bool integer_line(const std::vector<int64_t>& x, const std::vector<int64_t>& y) {
  size_t j = 1;
  while (j < x.size() && x[j] == x[0]) ++j;
  if (j == x.size() || (y[j] - y[0]) % (x[j] - x[0]) != 0) return false;
  const int64_t a = (y[j] - y[0]) / (x[j] - x[0]), b = y[0] - a * x[0];
  for (size_t i = 0; i < x.size(); ++i)
    if (y[i] != a * x[i] + b) return false;
  return true;
}

// Fits the family's kernels over the dims that vary between its samples.
std::optional<std::vector<kir::Kernel>> fit(const Family& f, const std::vector<int>& fixed) {
  const std::vector<int64_t>& first = f.samples.front().first;
  // One symbol per distinct way of varying: a dim that is an integer line of an earlier
  // symbol in every sample (a tensor's length and a bias's, a batch and the batch times the
  // sequence length of a flattened view) is no symbol of its own. Every graph the fit serves
  // is checked against its own kernels, so this reading of the samples is only ever used
  // where it holds; a graph it does not hold for adds its sample, and the next fit has more.
  std::vector<int> varying;
  auto values_of = [&](size_t d) {
    std::vector<int64_t> v;
    for (const auto& [dims, kernels] : f.samples) v.push_back(dims[d]);
    return v;
  };
  for (size_t d = 0; d < first.size(); ++d) {
    if (std::find(fixed.begin(), fixed.end(), int(d)) != fixed.end()) continue;  // mark_static
    const std::vector<int64_t> v = values_of(d);
    if (std::all_of(v.begin(), v.end(), [&](int64_t x) { return x == v[0]; })) continue;
    bool follows_earlier = false;
    for (int e : varying) follows_earlier |= integer_line(values_of(size_t(e)), v);
    if (!follows_earlier) varying.push_back(int(d));
  }
  if (varying.empty()) return std::nullopt;
  std::vector<kir::Kernel> out;
  for (size_t k = 0; k < f.samples.front().second.size(); ++k) {
    std::vector<KernelSample> samples;
    for (const auto& [dims, kernels] : f.samples) {
      KernelSample s;
      for (int d : varying) s.sizes.push_back(dims[size_t(d)]);
      s.kernel = kernels[k];
      samples.push_back(std::move(s));
    }
    std::optional<kir::Kernel> g = generalize(samples);
    if (!g) return std::nullopt;
    out.push_back(kir::substitute_symbols(*g, [&](int id) -> std::optional<kir::Index> {
      return kir::Index::symbol(varying[size_t(id)]);
    }));
  }
  return out;
}

}  // namespace

std::vector<int64_t> input_dims(const graph::Graph& g) {
  std::vector<int64_t> dims;
  for (const graph::Value* v : g.inputs())
    dims.insert(dims.end(), v->meta.sizes.begin(), v->meta.sizes.end());
  return dims;
}

FamilyLookup family_kernels(const std::vector<kir::Kernel>& lowered,
                            const std::vector<int64_t>& dims, bool use,
                            const std::vector<int>& fixed) {
  std::string key;
  for (const kir::Kernel& k : lowered) {
    key += kir::form(k);
    key += '\n';
  }
  key += std::to_string(dims.size());
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  Family& f = r.families[key];

  FamilyLookup out;
  auto reads_fixed = [&](const std::vector<kir::Kernel>& kernels) {
    if (fixed.empty()) return false;
    for (const kir::Kernel& k : kernels)
      for (int sym : k.size_symbols())
        if (std::find(fixed.begin(), fixed.end(), sym) != fixed.end()) return true;
    return false;
  };
  if (use && f.symbolic && !reads_fixed(*f.symbolic) && reproduces(*f.symbolic, lowered, dims)) {
    out.kernels = f.symbolic;
    return out;
  }
  bool seen = false;
  for (const auto& [d, kernels] : f.samples) seen |= d == dims;
  if (!seen && f.samples.size() < kMaxSamples) f.samples.push_back({dims, lowered});
  out.first = f.samples.size() == 1 && f.samples.front().first == dims;
  if (!use || f.samples.size() < 2) return out;
  // Dims marked static take this graph's values in every sample the fit reads.
  std::optional<std::vector<kir::Kernel>> fitted;
  if (fixed.empty()) {
    fitted = fit(f, fixed);
  } else {  // a copy of the samples that qualify: rare (mark_static), and small
    Family same;
    for (const auto& sample : f.samples)
      if (std::all_of(fixed.begin(), fixed.end(),
                      [&](int d) { return sample.first[size_t(d)] == dims[size_t(d)]; }))
        same.samples.push_back(sample);
    if (same.samples.size() >= 2) fitted = fit(same, fixed);
  }
  if (!fitted || reads_fixed(*fitted) || !reproduces(*fitted, lowered, dims)) return out;
  f.symbolic = std::move(fitted);
  out.kernels = f.symbolic;
  return out;
}

void clear_families() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.families.clear();
}

}  // namespace ember::compiler
