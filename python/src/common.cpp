// Argument conversions shared by the binding files (see common.h).
#include "common.h"

#include <string>

#include "ember/device.h"

namespace ember::python {

Shape shape_from_sequence(nb::handle seq, const char* op) {
  Shape s;
  if (!nb::isinstance<nb::tuple>(seq) && !nb::isinstance<nb::list>(seq))
    throw nb::type_error((std::string(op) + ": expected a size as ints or a tuple/list of ints, got " +
                          nb::type_name(seq.type()).c_str())
                             .c_str());
  for (nb::handle v : seq) {
    if (!PyIndex_Check(v.ptr()) || nb::isinstance<nb::bool_>(v))
      throw nb::type_error((std::string(op) + ": sizes must be ints, got " +
                            nb::type_name(v.type()).c_str())
                               .c_str());
    s.push_back(nb::cast<int64_t>(nb::int_(v)));
  }
  return s;
}

Shape shape_from_args(const nb::args& args, const char* op) {
  if (args.size() == 1 && !PyIndex_Check(args[0].ptr())) return shape_from_sequence(args[0], op);
  return shape_from_sequence(args, op);
}

Shape dims_arg(nb::handle dim, const char* op) {
  if (dim.is_none()) return {};
  if (PyIndex_Check(dim.ptr())) return {nb::cast<int64_t>(nb::int_(dim))};
  return shape_from_sequence(dim, op);
}

std::optional<Device> device_arg(nb::handle device) {
  if (device.is_none()) return std::nullopt;
  if (nb::isinstance<Device>(device)) return nb::cast<Device>(device);
  if (nb::isinstance<nb::str>(device)) return parse_device(nb::cast<std::string>(device));
  if (PyIndex_Check(device.ptr()) && !nb::isinstance<nb::bool_>(device))
    return Device{DeviceType::CUDA, nb::cast<int>(device)};
  throw nb::type_error(("device: expected a string such as 'cpu' or 'cuda:0', an ember.device "
                        "or a CUDA index, got " +
                        std::string(nb::type_name(device.type()).c_str()))
                           .c_str());
}

bool is_python_scalar(nb::handle o) {
  return PyBool_Check(o.ptr()) || PyLong_Check(o.ptr()) || PyFloat_Check(o.ptr());
}

std::optional<Tensor> as_operand(nb::handle o, const Tensor& like) {
  if (nb::isinstance<Tensor>(o)) return nb::cast<Tensor>(o);
  // The number takes `like`'s dtype unless its kind ranks above it, as PyTorch types a tensor
  // and a Python number: an int meets a bool tensor as int64, a float meets a bool or integer
  // tensor as the default float dtype. So the op needs no cast of the number (in a compiled
  // graph, a kernel of its own), and builds the graph C++'s `x * 2.0` does.
  const DType t = like.dtype();
  TensorOptions opts;
  opts.device = like.device();
  opts.dtype = t;
  double v;
  if (PyBool_Check(o.ptr())) {
    v = o.ptr() == Py_True ? 1 : 0;
  } else if (PyLong_Check(o.ptr())) {
    const int64_t i = nb::cast<int64_t>(o);
    v = double(i);
    // An int32 tensor meets an int beyond int32 as int64: the op then wraps it as PyTorch does.
    if (t == DType::Bool || (t == DType::Int32 && i != int64_t(int32_t(i))))
      opts.dtype = DType::Int64;
  } else if (PyFloat_Check(o.ptr())) {
    v = PyFloat_AS_DOUBLE(o.ptr());
    if (!is_floating(t)) opts.dtype = default_float_dtype();
  } else {
    return std::nullopt;
  }
  return full({}, v, opts);
}

Tensor operand_or_throw(nb::handle o, const Tensor& like, const char* op) {
  if (auto t = as_operand(o, like)) return *t;
  throw nb::type_error((std::string(op) + ": expected a Tensor or a Python number, got " +
                        nb::type_name(o.type()).c_str())
                           .c_str());
}

TensorOptions factory_options(std::optional<DType> dtype, nb::handle device, bool requires_grad,
                              DType default_dtype) {
  TensorOptions opts;
  opts.dtype = dtype.value_or(default_dtype);
  if (auto d = device_arg(device)) opts.device = *d;
  opts.requires_grad = requires_grad;
  return opts;
}

nb::object element_to_python(const Tensor& t) {
  // Integers through to_vector: item()'s double would round those beyond 2^53.
  if (t.dtype() == DType::Bool) return nb::bool_(t.item() != 0);
  if (is_integral(t.dtype())) return nb::int_(t.to_vector<int64_t>()[0]);
  return nb::float_(t.item());
}

}  // namespace ember::python
