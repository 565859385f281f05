// CPU kernel of topk: each lane along dim is copied into a (value, index) buffer and
// partially sorted, so a lane of n costs n log k. Lanes run in parallel.
#include <algorithm>
#include <cmath>
#include <utility>

#include "kernels/cpu/index.h"
#include "kernels/cpu/index_util.h"

namespace ember::cpu {

namespace {
// x > y in the order topk ranks by: NaN above every number (as PyTorch ranks it).
template <class C>
bool ranks_above(C x, C y) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(x)) return !std::isnan(y);
    if (std::isnan(y)) return false;
  }
  return x > y;
}
}  // namespace

void topk(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const int64_t d = a.dim, k = a.start, nd = x.dim();
  const bool largest = a.flag;
  const int64_t n = x.sizes()[d];
  const std::vector<int64_t> ot = offset_table(x.sizes(), x.strides(), 0, d);
  const std::vector<int64_t> it = offset_table(x.sizes(), x.strides(), d + 1, nd);
  const int64_t inner = int64_t(it.size()), lanes = int64_t(ot.size()) * inner;
  const int64_t xs = x.strides()[d];
  int64_t* io = static_cast<int64_t*>(out[1].impl()->data());
  visit_numeric(x.dtype(), "topk", [&]<class T>() {
    using C = compute_t<T>;
    using Entry = std::pair<C, int64_t>;
    const T* xp = static_cast<const T*>(x.impl()->data());
    T* vo = static_cast<T*>(out[0].impl()->data());
    // A total order on (value, position): ties go to the lower position.
    auto before = [largest](const Entry& p, const Entry& q) {
      const C& u = largest ? p.first : q.first;
      const C& v = largest ? q.first : p.first;
      if (ranks_above(u, v)) return true;
      if (ranks_above(v, u)) return false;
      return p.second < q.second;
    };
#pragma omp parallel if (lanes * n >= kParallelGrain && lanes > 1)
    {
      std::vector<Entry> buf(static_cast<size_t>(n));
#pragma omp for
      for (int64_t l = 0; l < lanes; ++l) {
        const int64_t oo = l / inner, i = l % inner;
        const T* lane = xp + ot[oo] + it[i];
        for (int64_t j = 0; j < n; ++j) buf[j] = Entry(C(lane[j * xs]), j);
        std::partial_sort(buf.begin(), buf.begin() + k, buf.end(), before);
        for (int64_t t = 0; t < k; ++t) {
          const int64_t pos = (oo * k + t) * inner + i;
          vo[pos] = T(buf[t].first);
          io[pos] = buf[t].second;
        }
      }
    }
  });
}

}  // namespace ember::cpu
