// Cross entropy of logits [N, C] against class targets [N], fused: per row, the max-subtracted
// logsumexp and the loss lse - logit[target] in one task; then the mean over non-ignored rows,
// summed in order (in double) so the result does not depend on the thread count.
#include <cmath>
#include <vector>

#include "kernels/cpu/reduce_loops.h"
#include "kernels/cpu/reducers.h"
#include "kernels/cpu/rowwise.h"
#include "kernels/cpu/rowwise_buffers.h"

namespace ember::cpu {

namespace {
// Targets must be classes or ignore_index; checked before any parallel loop (no throwing there).
void check_targets(const int64_t* t, int64_t n, int64_t classes, int64_t ignore_index) {
  for (int64_t i = 0; i < n; ++i) {
    EMBER_CHECK(t[i] == ignore_index || (t[i] >= 0 && t[i] < classes), "cross_entropy: target ",
                t[i], " (at position ", i, ") is out of range for ", classes,
                " classes; targets must be in [0, ", classes, ") or equal ignore_index (",
                ignore_index, ")");
  }
}
}  // namespace

void cross_entropy(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor logits = compute_contiguous(in[0]);
  const Tensor targets = packed(in[1]);
  const int64_t rows = logits.sizes()[0], classes = logits.sizes()[1];
  const int64_t ignore = a.end;
  const int64_t* t = static_cast<const int64_t*>(targets.impl()->data());
  check_targets(t, rows, classes, ignore);
  std::vector<double> row_loss(static_cast<size_t>(rows));
  visit_compute(logits.dtype(), [&]<class C>() {
    const C* xp = static_cast<const C*>(logits.impl()->data());
    C* lse = static_cast<C*>(out[1].impl()->data());
#pragma omp parallel for schedule(static) if (use_threads(rows * classes) && rows > 1)
    for (int64_t r = 0; r < rows; ++r) {
      const C* xr = xp + r * classes;
      const C m = fold_run(xr, classes, ExtremeReducer<C, true>{});
      const C s = fold_run(xr, classes, ExpSumReducer<C>{m});
      const C log_sum = fn::Log{}(s);
      lse[r] = std::isfinite(m) ? m + log_sum : m;
      // (max - logit) + log(sum): exact up to the last rounding even when logits are large.
      if (t[r] != ignore)
        row_loss[size_t(r)] =
            std::isfinite(m) ? double((m - xr[t[r]]) + log_sum) : double(lse[r] - xr[t[r]]);
    }
  });
  double total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (t[r] == ignore) continue;
    total += row_loss[size_t(r)];
    ++count;
  }
  const double loss = total / double(count);  // nan when every target is ignored, as in PyTorch
  visit_float(out[0].dtype(), "cross_entropy",
              [&]<class T>() { *static_cast<T*>(out[0].impl()->data()) = T(compute_t<T>(loss)); });
}


}  // namespace ember::cpu
