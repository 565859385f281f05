// Shared by the binding files: argument conversions (shapes, dims, dtypes, devices, Python
// scalars as tensor operands) and the bind_* entry points module.cpp calls.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>

#include "ember/ops.h"
#include "ember/tensor.h"

namespace nb = nanobind;

namespace ember::python {

// Sizes given as `f(2, 3)` or `f((2, 3))` / `f([2, 3])`; `op` names the function in errors.
Shape shape_from_args(const nb::args& args, const char* op);
// A sequence of ints (tuple, list) as a Shape.
Shape shape_from_sequence(nb::handle seq, const char* op);
// `dim=` of a reduction: None (every dim), an int, or a sequence of ints.
Shape dims_arg(nb::handle dim, const char* op);
// `device=`: None (unset), "cpu" / "cuda" / "cuda:N", an ember.device, or a CUDA index.
std::optional<Device> device_arg(nb::handle device);
// Whether o is a Python bool, int or float.
bool is_python_scalar(nb::handle o);
// A tensor operand: the tensor itself, or a Python bool/int/float as a 0-dim tensor on
// `like`'s device, of `like`'s dtype where the number's kind allows (common.cpp); nullopt for
// anything else (binary operators then return NotImplemented).
std::optional<Tensor> as_operand(nb::handle o, const Tensor& like);
// The same, but a TypeError naming `op` for anything else.
Tensor operand_or_throw(nb::handle o, const Tensor& like, const char* op);
// Factory options from the keyword arguments (dtype None: `default_dtype`).
TensorOptions factory_options(std::optional<DType> dtype, nb::handle device, bool requires_grad,
                              DType default_dtype);
// One element of a tensor as the Python object of its kind (bool, int or float).
nb::object element_to_python(const Tensor& t);

void bind_dtype_device(nb::module_& m);
void bind_tensor_core(nb::module_& m, nb::class_<Tensor>& cls);
void bind_tensor_math(nb::module_& m, nb::class_<Tensor>& cls);
void bind_tensor_views(nb::module_& m, nb::class_<Tensor>& cls);
void bind_indexing(nb::class_<Tensor>& cls);
void bind_factories(nb::module_& m);
void bind_functions(nb::module_& m);
void bind_interop(nb::module_& m, nb::class_<Tensor>& cls);
void bind_autograd(nb::module_& m, nb::class_<Tensor>& cls);
void bind_compile(nb::module_& m);
void bind_optim(nb::module_& m);
void bind_io(nb::module_& m);
void bind_data(nb::module_& m);

}  // namespace ember::python
