// ember.Tensor's arithmetic: operators with tensors and Python numbers, pointwise math,
// comparisons, reductions and the in-place ops (which return the tensor itself).
#include "common.h"

#include <string>

namespace ember::python {
namespace {

using Self = nb::pointer_and_handle<Tensor>;
using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);

// A binary operator: NotImplemented for operands it does not know, so Python tries the other
// side (and raises its usual TypeError).
template <BinaryFn F, bool Reflected = false>
nb::object binary_op(const Tensor& a, nb::handle b) {
  auto o = as_operand(b, a);
  if (!o) return nb::borrow(Py_NotImplemented);
  return nb::cast(Reflected ? F(*o, a) : F(a, *o));
}

Tensor add_fn(const Tensor& a, const Tensor& b) { return a.add(b); }
Tensor sub_fn(const Tensor& a, const Tensor& b) { return a.sub(b); }
Tensor mul_fn(const Tensor& a, const Tensor& b) { return a.mul(b); }
Tensor div_fn(const Tensor& a, const Tensor& b) { return a.div(b); }
Tensor pow_fn(const Tensor& a, const Tensor& b) { return a.pow(b); }
Tensor matmul_fn(const Tensor& a, const Tensor& b) { return a.matmul(b); }
Tensor eq_fn(const Tensor& a, const Tensor& b) { return a.eq(b); }
Tensor ne_fn(const Tensor& a, const Tensor& b) { return a.ne(b); }
Tensor lt_fn(const Tensor& a, const Tensor& b) { return a.lt(b); }
Tensor le_fn(const Tensor& a, const Tensor& b) { return a.le(b); }
Tensor gt_fn(const Tensor& a, const Tensor& b) { return a.gt(b); }
Tensor ge_fn(const Tensor& a, const Tensor& b) { return a.ge(b); }
Tensor land_fn(const Tensor& a, const Tensor& b) { return a.logical_and(b); }
Tensor lor_fn(const Tensor& a, const Tensor& b) { return a.logical_or(b); }
Tensor lxor_fn(const Tensor& a, const Tensor& b) { return a.logical_xor(b); }

Tensor add_scaled(const Tensor& a, const Tensor& b, double alpha) {
  return alpha == 1 ? a.add(b) : a.add(b.mul(full({}, alpha, TensorOptions(DType::Float64))));
}

// The named tuple max/min/topk/sort return (values, indices), as torch.return_types.
nb::object values_indices(const Tensor& values, const Tensor& indices) {
  static nb::object* type = new nb::object(nb::module_::import_("collections")
                                               .attr("namedtuple")("values_indices",
                                                                   "values indices"));
  return (*type)(values, indices);
}

// max()/min(): over everything, along a dim (values and indices), or elementwise with another
// tensor.
template <bool Max>
nb::object extremum(const Tensor& t, nb::handle dim, bool keepdim) {
  if (dim.is_none()) return nb::cast(Max ? t.amax() : t.amin());
  if (nb::isinstance<Tensor>(dim)) {
    Tensor o = nb::cast<Tensor>(dim);
    return nb::cast(Max ? t.maximum(o) : t.minimum(o));
  }
  int64_t d = nb::cast<int64_t>(dim);
  return values_indices(Max ? t.amax({d}, keepdim) : t.amin({d}, keepdim),
                        Max ? t.argmax(d, keepdim) : t.argmin(d, keepdim));
}

Tensor reduce_dtype(const Tensor& t, std::optional<DType> dtype) {
  return dtype ? t.to(*dtype) : t;
}

}  // namespace

void bind_tensor_math(nb::module_& m, nb::class_<Tensor>& cls) {

  cls.def("__add__", &binary_op<add_fn>, nb::arg("other").none())
      .def("__radd__", &binary_op<add_fn, true>, nb::arg("other").none())
      .def("__sub__", &binary_op<sub_fn>, nb::arg("other").none())
      .def("__rsub__", &binary_op<sub_fn, true>, nb::arg("other").none())
      .def("__mul__", &binary_op<mul_fn>, nb::arg("other").none())
      .def("__rmul__", &binary_op<mul_fn, true>, nb::arg("other").none())
      .def("__truediv__", &binary_op<div_fn>, nb::arg("other").none())
      .def("__rtruediv__", &binary_op<div_fn, true>, nb::arg("other").none())
      .def("__pow__", &binary_op<pow_fn>, nb::arg("other").none())
      .def("__rpow__", &binary_op<pow_fn, true>, nb::arg("other").none())
      .def("__matmul__", &binary_op<matmul_fn>, nb::arg("other").none())
      .def("__rmatmul__", &binary_op<matmul_fn, true>, nb::arg("other").none())
      .def("__eq__", &binary_op<eq_fn>, nb::arg("other").none())
      .def("__ne__", &binary_op<ne_fn>, nb::arg("other").none())
      .def("__lt__", &binary_op<lt_fn>, nb::arg("other").none())
      .def("__le__", &binary_op<le_fn>, nb::arg("other").none())
      .def("__gt__", &binary_op<gt_fn>, nb::arg("other").none())
      .def("__ge__", &binary_op<ge_fn>, nb::arg("other").none())
      .def("__and__", &binary_op<land_fn>, nb::arg("other").none())
      .def("__or__", &binary_op<lor_fn>, nb::arg("other").none())
      .def("__xor__", &binary_op<lxor_fn>, nb::arg("other").none())
      .def("__invert__", &Tensor::logical_not)
      .def("__neg__", &Tensor::neg)
      .def("__abs__", &Tensor::abs);

  // Named binary ops take a Tensor or a Python number.
  cls.def("add",
          [](const Tensor& a, nb::handle b, double alpha) {
            return add_scaled(a, operand_or_throw(b, a, "add"), alpha);
          },
          nb::arg("other"), nb::kw_only(), nb::arg("alpha") = 1.0)
      .def("sub",
           [](const Tensor& a, nb::handle b, double alpha) {
             return add_scaled(a, operand_or_throw(b, a, "sub"), -alpha);
           },
           nb::arg("other"), nb::kw_only(), nb::arg("alpha") = 1.0)
      .def("mul", [](const Tensor& a, nb::handle b) { return a.mul(operand_or_throw(b, a, "mul")); })
      .def("div", [](const Tensor& a, nb::handle b) { return a.div(operand_or_throw(b, a, "div")); })
      .def("pow", [](const Tensor& a, nb::handle b) { return a.pow(operand_or_throw(b, a, "pow")); })
      .def("eq", [](const Tensor& a, nb::handle b) { return a.eq(operand_or_throw(b, a, "eq")); })
      .def("ne", [](const Tensor& a, nb::handle b) { return a.ne(operand_or_throw(b, a, "ne")); })
      .def("lt", [](const Tensor& a, nb::handle b) { return a.lt(operand_or_throw(b, a, "lt")); })
      .def("le", [](const Tensor& a, nb::handle b) { return a.le(operand_or_throw(b, a, "le")); })
      .def("gt", [](const Tensor& a, nb::handle b) { return a.gt(operand_or_throw(b, a, "gt")); })
      .def("ge", [](const Tensor& a, nb::handle b) { return a.ge(operand_or_throw(b, a, "ge")); })
      .def("maximum", &Tensor::maximum)
      .def("minimum", &Tensor::minimum)
      .def("matmul", &Tensor::matmul)
      .def("logical_and", &Tensor::logical_and)
      .def("logical_or", &Tensor::logical_or)
      .def("logical_xor", &Tensor::logical_xor)
      .def("logical_not", &Tensor::logical_not);

  // Pointwise.
  cls.def("neg", &Tensor::neg)
      .def("exp", &Tensor::exp)
      .def("log", &Tensor::log)
      .def("sqrt", &Tensor::sqrt)
      .def("rsqrt", &Tensor::rsqrt)
      .def("abs", &Tensor::abs)
      .def("tanh", &Tensor::tanh)
      .def("sigmoid", &Tensor::sigmoid)
      .def("relu", &Tensor::relu)
      .def("silu", &Tensor::silu)
      .def("sign", &Tensor::sign)
      .def("gelu",
           [](const Tensor& t, const std::string& approximate) {
             if (approximate != "none" && approximate != "tanh")
               throw nb::value_error(("gelu: approximate must be 'none' or 'tanh', got '" +
                                      approximate + "'").c_str());
             return t.gelu(approximate == "tanh");
           },
           nb::kw_only(), nb::arg("approximate") = "none")
      .def("clamp", &Tensor::clamp, nb::arg("min") = nb::none(), nb::arg("max") = nb::none())
      .def("masked_fill", &Tensor::masked_fill, nb::arg("mask"), nb::arg("value"))
      .def("where", &Tensor::where, nb::arg("condition"), nb::arg("other"));

  // Reductions: dim None (all), an int or a sequence of ints.
  cls.def("sum",
          [](const Tensor& t, nb::handle dim, bool keepdim, std::optional<DType> dtype) {
            return reduce_dtype(t, dtype).sum(dims_arg(dim, "sum"), keepdim);
          },
          nb::arg("dim") = nb::none(), nb::arg("keepdim") = false, nb::kw_only(),
          nb::arg("dtype") = nb::none())
      .def("mean",
           [](const Tensor& t, nb::handle dim, bool keepdim, std::optional<DType> dtype) {
             return reduce_dtype(t, dtype).mean(dims_arg(dim, "mean"), keepdim);
           },
           nb::arg("dim") = nb::none(), nb::arg("keepdim") = false, nb::kw_only(),
           nb::arg("dtype") = nb::none())
      .def("amax", [](const Tensor& t, nb::handle dim, bool keepdim) {
             return t.amax(dims_arg(dim, "amax"), keepdim);
           }, nb::arg("dim") = nb::none(), nb::arg("keepdim") = false)
      .def("amin", [](const Tensor& t, nb::handle dim, bool keepdim) {
             return t.amin(dims_arg(dim, "amin"), keepdim);
           }, nb::arg("dim") = nb::none(), nb::arg("keepdim") = false)
      .def("max", &extremum<true>, nb::arg("dim") = nb::none(), nb::arg("keepdim") = false)
      .def("min", &extremum<false>, nb::arg("dim") = nb::none(), nb::arg("keepdim") = false)
      .def("argmax", &Tensor::argmax, nb::arg("dim") = nb::none(), nb::arg("keepdim") = false)
      .def("argmin", &Tensor::argmin, nb::arg("dim") = nb::none(), nb::arg("keepdim") = false)
      .def("var", [](const Tensor& t, nb::handle dim, int64_t correction, bool keepdim) {
             return t.var(dims_arg(dim, "var"), correction, keepdim);
           }, nb::arg("dim") = nb::none(), nb::kw_only(), nb::arg("correction") = 1,
           nb::arg("keepdim") = false)
      .def("std", [](const Tensor& t, nb::handle dim, int64_t correction, bool keepdim) {
             return t.std(dims_arg(dim, "std"), correction, keepdim);
           }, nb::arg("dim") = nb::none(), nb::kw_only(), nb::arg("correction") = 1,
           nb::arg("keepdim") = false)
      .def("logsumexp", [](const Tensor& t, nb::handle dim, bool keepdim) {
             return t.logsumexp(dims_arg(dim, "logsumexp"), keepdim);
           }, nb::arg("dim"), nb::arg("keepdim") = false)
      .def("softmax", &Tensor::softmax, nb::arg("dim"))
      .def("log_softmax", &Tensor::log_softmax, nb::arg("dim"))
      .def("topk",
           [](const Tensor& t, int64_t k, int64_t dim, bool largest, bool sorted) {
             auto [v, i] = t.topk(k, dim, largest, sorted);
             return values_indices(v, i);
           },
           nb::arg("k"), nb::arg("dim") = -1, nb::arg("largest") = true, nb::arg("sorted") = true);

  // In place: each returns the tensor it was called on (the same Python object).
  auto inplace = [&](const char* name, auto fn) {
    cls.def(name, [fn](Self self, nb::handle o) -> nb::object {
      fn(*self.p, o);
      return nb::borrow(self.h);
    });
  };
  inplace("add_", [](Tensor& t, nb::handle o) { t.add_(operand_or_throw(o, t, "add_")); });
  inplace("sub_", [](Tensor& t, nb::handle o) { t.sub_(operand_or_throw(o, t, "sub_")); });
  inplace("mul_", [](Tensor& t, nb::handle o) { t.mul_(operand_or_throw(o, t, "mul_")); });
  inplace("div_", [](Tensor& t, nb::handle o) { t.div_(operand_or_throw(o, t, "div_")); });
  inplace("__iadd__", [](Tensor& t, nb::handle o) { t.add_(operand_or_throw(o, t, "+=")); });
  inplace("__isub__", [](Tensor& t, nb::handle o) { t.sub_(operand_or_throw(o, t, "-=")); });
  inplace("__imul__", [](Tensor& t, nb::handle o) { t.mul_(operand_or_throw(o, t, "*=")); });
  inplace("__itruediv__", [](Tensor& t, nb::handle o) { t.div_(operand_or_throw(o, t, "/=")); });
  inplace("copy_", [](Tensor& t, nb::handle o) { t.copy_(operand_or_throw(o, t, "copy_")); });
  inplace("fill_", [](Tensor& t, nb::handle o) { t.fill_(nb::cast<double>(nb::float_(o))); });
  cls.def("zero_", [](Self self) -> nb::object {
       self.p->zero_();
       return nb::borrow(self.h);
     })
      .def("masked_fill_",
           [](Self self, const Tensor& mask, double value) -> nb::object {
             self.p->masked_fill_(mask, value);
             return nb::borrow(self.h);
           },
           nb::arg("mask"), nb::arg("value"))
      .def("clamp_",
           [](Self self, std::optional<double> lo, std::optional<double> hi) -> nb::object {
             self.p->clamp_(lo, hi);
             return nb::borrow(self.h);
           },
           nb::arg("min") = nb::none(), nb::arg("max") = nb::none());
  (void)m;
}

}  // namespace ember::python
