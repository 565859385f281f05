// Type promotion (PyTorch's lattice over our dtypes) and the default float dtype.
#include "ember/dtype.h"

namespace ember {

namespace {
DType g_default_float = DType::Float32;
}

DType default_float_dtype() { return g_default_float; }
void set_default_float_dtype(DType t) { g_default_float = t; }

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (!fa) return DType::Int64;  // int32 with int64
  // Both floating: half and bfloat16 meet at float32; otherwise the wider wins.
  if ((a == DType::Float16 && b == DType::BFloat16) || (a == DType::BFloat16 && b == DType::Float16))
    return DType::Float32;
  return dtype_size(a) >= dtype_size(b) ? a : b;
}

}  // namespace ember
