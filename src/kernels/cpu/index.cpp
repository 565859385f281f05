// CPU kernels of gathers and scatters by index tensors: index_select, gather, index_add and
// scatter_add. Inputs may be strided: outer and inner dims are addressed through offset
// tables. Every index is bounds-checked before any thread starts writing.
#include "kernels/cpu/index.h"

#include <cstring>

#include "kernels/cpu/index_util.h"

namespace ember::cpu {

namespace {
// Inner dims are processed in blocks so that scatters can run in parallel over (outer, block)
// pairs: each pair owns a disjoint set of output elements, so no two threads add to the same
// element and the order of additions (ascending index position) is deterministic.
constexpr int64_t kInnerBlock = 256;
}  // namespace

void index_select(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor idx = contiguous_copy(in[1]);
  const Tensor& o = out[0];
  const int64_t d = a.dim, nd = x.dim(), n = idx.numel();
  const int64_t outer = span_numel(x.sizes(), 0, d), inner = span_numel(x.sizes(), d + 1, nd);
  visit_index(idx.dtype(), "index_select", [&]<class I>() {
    const I* ip = static_cast<const I*>(idx.impl()->data());
    check_indices(ip, n, x.sizes()[d], "index_select", d);
    const std::vector<int64_t> ot = offset_table(x.sizes(), x.strides(), 0, d);
    const bool inner_contig = dims_contiguous(x, d + 1, nd);
    const std::vector<int64_t> it =
        inner_contig ? std::vector<int64_t>{} : offset_table(x.sizes(), x.strides(), d + 1, nd);
    const int64_t xs = x.strides()[d];
    visit_bits(x.dtype(), [&]<class U>() {
      const U* xp = static_cast<const U*>(x.impl()->data());
      U* op = static_cast<U*>(o.impl()->data());
      const int64_t rows = outer * n;
#pragma omp parallel for if (rows * inner >= kParallelGrain && rows > 1)
      for (int64_t r = 0; r < rows; ++r) {
        const U* src = xp + ot[r / n] + int64_t(ip[r % n]) * xs;
        U* dst = op + r * inner;
        if (inner_contig) {
          std::memcpy(dst, src, size_t(inner) * sizeof(U));
        } else {
          for (int64_t i = 0; i < inner; ++i) dst[i] = src[it[i]];
        }
      }
    });
  });
}

void gather(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor idx = contiguous_copy(in[1]);
  const Tensor& o = out[0];
  const int64_t d = a.dim, nd = idx.dim();
  const Shape& is = idx.sizes();
  const int64_t outer = span_numel(is, 0, d), m = is[d], inner = span_numel(is, d + 1, nd);
  visit_index(idx.dtype(), "gather", [&]<class I>() {
    const I* ip = static_cast<const I*>(idx.impl()->data());
    check_indices(ip, idx.numel(), x.sizes()[d], "gather", d);
    // Tables span the index's sizes with the input's strides.
    const std::vector<int64_t> ot = offset_table(is, x.strides(), 0, d);
    const std::vector<int64_t> it = offset_table(is, x.strides(), d + 1, nd);
    const int64_t xs = x.strides()[d];
    const bool unit = is_identity(it);
    visit_bits(x.dtype(), [&]<class U>() {
      const U* xp = static_cast<const U*>(x.impl()->data());
      U* op = static_cast<U*>(o.impl()->data());
      const int64_t rows = outer * m;
#pragma omp parallel for if (rows * inner >= kParallelGrain && rows > 1)
      for (int64_t r = 0; r < rows; ++r) {
        const U* src = xp + ot[r / m];
        const I* row_idx = ip + r * inner;
        U* dst = op + r * inner;
        if (unit) {
          for (int64_t i = 0; i < inner; ++i) dst[i] = src[int64_t(row_idx[i]) * xs + i];
        } else {
          for (int64_t i = 0; i < inner; ++i) dst[i] = src[int64_t(row_idx[i]) * xs + it[i]];
        }
      }
    });
  });
}

namespace {
// out[outer o, index, inner i] += src[o, j, i] for every position (o, j, i) of the index space
// [outer, m, inner]. kPerSlice: the index is 1-D and picks a whole slice for each j
// (index_add); otherwise the index has one entry per position (scatter_add). out and src are
// addressed by their offset tables.
template <class T, bool kPerSlice, class I>
void scatter_accumulate(const Tensor& o, const Tensor& src, const I* ip, int64_t d, int64_t outer,
                        int64_t m, int64_t inner, const std::vector<int64_t>& oot,
                        const std::vector<int64_t>& oit, const std::vector<int64_t>& sot,
                        const std::vector<int64_t>& sit) {
  using C = compute_t<T>;
  const T* sp = static_cast<const T*>(src.impl()->data());
  T* op = static_cast<T*>(o.impl()->data());
  const int64_t os = o.strides()[d], ss = src.strides()[d];
  const bool unit = is_identity(oit) && is_identity(sit);
  const int64_t blocks = (inner + kInnerBlock - 1) / kInnerBlock;
  const int64_t work = outer * m * inner;
#pragma omp parallel for collapse(2) if (work >= kParallelGrain && outer * blocks > 1)
  for (int64_t oo = 0; oo < outer; ++oo) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t i0 = b * kInnerBlock, i1 = std::min(inner, i0 + kInnerBlock);
      for (int64_t j = 0; j < m; ++j) {
        const T* s = sp + sot[oo] + j * ss;
        if constexpr (kPerSlice) {
          T* dst = op + oot[oo] + int64_t(ip[j]) * os;
          if (unit) {
            for (int64_t i = i0; i < i1; ++i) dst[i] = T(C(dst[i]) + C(s[i]));
          } else {
            for (int64_t i = i0; i < i1; ++i) dst[oit[i]] = T(C(dst[oit[i]]) + C(s[sit[i]]));
          }
        } else {
          T* dst = op + oot[oo];
          const I* row = ip + (oo * m + j) * inner;
          for (int64_t i = i0; i < i1; ++i) {
            T& e = dst[int64_t(row[i]) * os + oit[i]];
            e = T(C(e) + C(s[sit[i]]));
          }
        }
      }
    }
  }
}

// Copies x into the (contiguous) output before the scatter adds into it.
void copy_into(const Tensor& x, const Tensor& o) {
  Tensor src[1] = {x};
  Tensor dst[1] = {o};
  clone(src, dst, Attrs{});
}
}  // namespace

void index_add(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor idx = contiguous_copy(in[1]);
  const Tensor& src = in[2];
  const Tensor& o = out[0];
  const int64_t d = a.dim, nd = x.dim(), n = idx.numel();
  copy_into(x, o);
  if (src.numel() == 0) return;
  const int64_t outer = span_numel(src.sizes(), 0, d), inner = span_numel(src.sizes(), d + 1, nd);
  visit_index(idx.dtype(), "index_add", [&]<class I>() {
    const I* ip = static_cast<const I*>(idx.impl()->data());
    check_indices(ip, n, x.sizes()[d], "index_add", d);
    const std::vector<int64_t> oot = offset_table(o.sizes(), o.strides(), 0, d);
    const std::vector<int64_t> oit = offset_table(o.sizes(), o.strides(), d + 1, nd);
    const std::vector<int64_t> sot = offset_table(src.sizes(), src.strides(), 0, d);
    const std::vector<int64_t> sit = offset_table(src.sizes(), src.strides(), d + 1, nd);
    visit_numeric(o.dtype(), "index_add", [&]<class T>() {
      scatter_accumulate<T, true>(o, src, ip, d, outer, n, inner, oot, oit, sot, sit);
    });
  });
}

void scatter_add(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor idx = contiguous_copy(in[1]);
  const Tensor& src = in[2];
  const Tensor& o = out[0];
  const int64_t d = a.dim, nd = idx.dim();
  copy_into(x, o);
  if (idx.numel() == 0) return;
  const Shape& is = idx.sizes();
  const int64_t outer = span_numel(is, 0, d), m = is[d], inner = span_numel(is, d + 1, nd);
  visit_index(idx.dtype(), "scatter_add", [&]<class I>() {
    const I* ip = static_cast<const I*>(idx.impl()->data());
    check_indices(ip, idx.numel(), x.sizes()[d], "scatter_add", d);
    // Every table spans the index's sizes, with the strides of the tensor it addresses.
    const std::vector<int64_t> oot = offset_table(is, o.strides(), 0, d);
    const std::vector<int64_t> oit = offset_table(is, o.strides(), d + 1, nd);
    const std::vector<int64_t> sot = offset_table(is, src.strides(), 0, d);
    const std::vector<int64_t> sit = offset_table(is, src.strides(), d + 1, nd);
    visit_numeric(o.dtype(), "scatter_add", [&]<class T>() {
      scatter_accumulate<T, false>(o, src, ip, d, outer, m, inner, oot, oit, sot, sit);
    });
  });
}

}  // namespace ember::cpu
