// autocast scopes (ember/autocast.h) and the casts the front ends apply under them.
#include "ember/autocast.h"

#include "ember/error.h"
#include "ops/frontend.h"

namespace ember {

namespace {
thread_local std::optional<DType> tls_autocast;
}  // namespace

autocast::autocast(DType dtype, bool enabled) : prev_(tls_autocast) {
  EMBER_CHECK(!enabled || dtype == DType::BFloat16 || dtype == DType::Float16,
              "autocast: the dtype must be bfloat16 or float16, got ", dtype_name(dtype));
  tls_autocast = enabled ? std::optional<DType>(dtype) : std::nullopt;
}

autocast::~autocast() { tls_autocast = prev_; }

std::optional<DType> autocast_dtype() { return tls_autocast; }

Tensor autocast_lower(const Tensor& t) {
  if (!tls_autocast || !t.defined() || t.dtype() != DType::Float32) return t;
  // A transposed matrix (a linear layer's weight.t()) is cast as it lies and transposed back:
  // the cast is one contiguous pass instead of a transposing copy, and the product reads its
  // operand transposed at no cost.
  if (t.dim() == 2 && !t.is_contiguous() && t.t().is_contiguous())
    return t.t().to(*tls_autocast).t();
  return t.to(*tls_autocast);
}

Tensor autocast_float32(const Tensor& t) {
  if (!tls_autocast || !t.defined()) return t;
  if (t.dtype() != DType::BFloat16 && t.dtype() != DType::Float16) return t;
  return t.to(DType::Float32);
}

}  // namespace ember
