// Calls a templated lambda with the C++ type of a dtype: visit_float(t, [&]<class T>() {...}).
#pragma once
#include "ember/dtype.h"
#include "ember/error.h"

namespace ember::cpu {

// Arithmetic happens in float for the 16-bit float types, in the storage type otherwise.
template <class T> struct ComputeType { using type = T; };
template <> struct ComputeType<Half> { using type = float; };
template <> struct ComputeType<BFloat16> { using type = float; };
template <class T> using compute_t = typename ComputeType<T>::type;

// Accumulation type of reductions: float64 for float64, int64 for integers, float otherwise.
template <class T> struct AccType { using type = float; };
template <> struct AccType<double> { using type = double; };
template <> struct AccType<int32_t> { using type = int64_t; };
template <> struct AccType<int64_t> { using type = int64_t; };
template <> struct AccType<bool> { using type = int64_t; };
template <class T> using acc_t = typename AccType<T>::type;

template <class F>
void visit_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32: f.template operator()<float>(); return;
    case DType::Float64: f.template operator()<double>(); return;
    case DType::Float16: f.template operator()<Half>(); return;
    case DType::BFloat16: f.template operator()<BFloat16>(); return;
    default: EMBER_FAIL(op, ": not implemented for dtype ", dtype_name(t), " (floating types only)");
  }
}

template <class F>
void visit_numeric(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Int32: f.template operator()<int32_t>(); return;
    case DType::Int64: f.template operator()<int64_t>(); return;
    default: visit_float(t, op, f);
  }
}

template <class F>
void visit_all(DType t, const char* op, F&& f) {
  if (t == DType::Bool) {
    f.template operator()<bool>();
    return;
  }
  visit_numeric(t, op, f);
}

}  // namespace ember::cpu
