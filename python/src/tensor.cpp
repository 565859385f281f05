// ember.Tensor's metadata, printing, conversions to Python values and other dtypes/devices.
#include "common.h"

#include <string>

namespace ember::python {
namespace {

// Nested lists of the elements of the contiguous host copy `values` (PyTorch's tolist).
template <class T, class Make>
nb::object nest(const Shape& sizes, size_t d, const std::vector<T>& values, size_t& pos,
                const Make& make) {
  if (d == sizes.size()) return make(values[pos++]);
  nb::list out;
  for (int64_t i = 0; i < sizes[d]; ++i) out.append(nest(sizes, d + 1, values, pos, make));
  return out;
}

nb::object tolist(const Tensor& t) {
  size_t pos = 0;
  if (is_floating(t.dtype()))
    return nest(t.sizes(), 0, t.to_vector<double>(), pos, [](double v) { return nb::float_(v); });
  if (t.dtype() == DType::Bool)
    return nest(t.sizes(), 0, t.to_vector<int64_t>(), pos,
                [](int64_t v) { return nb::bool_(v != 0); });
  return nest(t.sizes(), 0, t.to_vector<int64_t>(), pos, [](int64_t v) { return nb::int_(v); });
}

nb::object item(const Tensor& t) {
  if (t.numel() != 1)
    throw nb::value_error(("item(): a tensor with " + std::to_string(t.numel()) +
                           " elements (shape " + t.shape_str() +
                           ") cannot be converted to a Python number; only one-element tensors can")
                              .c_str());
  return element_to_python(t);
}

nb::tuple shape_tuple(const Tensor& t) {
  nb::list l;
  for (int64_t s : t.sizes()) l.append(s);
  return nb::tuple(l);
}

// t.to(dtype), t.to(device), t.to(device, dtype), t.to(other), with dtype=/device= keywords.
Tensor to(const Tensor& t, const nb::args& args, const nb::kwargs& kwargs) {
  std::optional<DType> dtype;
  std::optional<Device> device;
  auto take = [&](nb::handle a) {
    if (nb::isinstance<DType>(a)) {
      dtype = nb::cast<DType>(a);
    } else if (nb::isinstance<Tensor>(a)) {
      const Tensor o = nb::cast<Tensor>(a);
      dtype = o.dtype();
      device = o.device();
    } else if (!a.is_none()) {
      device = device_arg(a);
    }
  };
  for (nb::handle a : args) take(a);
  for (auto [k, v] : kwargs) {
    std::string key = nb::cast<std::string>(k);
    if (key == "dtype" || key == "device")
      take(v);
    else if (key != "non_blocking" && key != "copy")
      throw nb::type_error(("to(): unexpected keyword argument '" + key + "'").c_str());
  }
  Tensor r = t;
  if (device && *device != r.device()) r = r.to(*device);
  if (dtype) r = r.to(*dtype);
  return r;
}

void check_has_len(const Tensor& t) {
  if (t.dim() == 0) throw nb::type_error("len() of a 0-d tensor");
}

}  // namespace

void bind_tensor_core(nb::module_& m, nb::class_<Tensor>& cls) {
  cls.def_prop_ro("dtype", &Tensor::dtype)
      .def_prop_ro("device", &Tensor::device)
      .def_prop_ro("shape", &shape_tuple)
      .def_prop_ro("ndim", &Tensor::dim)
      .def_prop_ro("is_cuda", [](const Tensor& t) { return t.device().type == DeviceType::CUDA; })
      .def("size",
           [](const Tensor& t, std::optional<int64_t> dim) -> nb::object {
             if (dim) return nb::int_(t.size(*dim));
             return shape_tuple(t);
           },
           nb::arg("dim") = nb::none(), "The sizes (a tuple), or the size of one dim.")
      .def("stride",
           [](const Tensor& t, std::optional<int64_t> dim) -> nb::object {
             if (dim) return nb::int_(t.stride(*dim));
             nb::list l;
             for (int64_t s : t.strides()) l.append(s);
             return nb::tuple(l);
           },
           nb::arg("dim") = nb::none(), "Strides in elements (a tuple), or one dim's.")
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("element_size", [](const Tensor& t) { return dtype_size(t.dtype()); })
      .def("storage_offset", &Tensor::storage_offset)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("is_floating_point", [](const Tensor& t) { return is_floating(t.dtype()); })
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); },
           "Address of the first element, as an int.")
      .def("__repr__", [](const Tensor& t) { return to_string(t); })
      .def("item", &item, "The value of a one-element tensor as a Python bool, int or float.")
      .def("tolist", &tolist, "The elements as nested Python lists (a number for 0-dim).")
      .def("__len__", [](const Tensor& t) { check_has_len(t); return t.size(0); })
      .def("__iter__",
           [](const Tensor& t) {
             if (t.dim() == 0) throw nb::type_error("iteration over a 0-d tensor");
             nb::list rows;
             for (int64_t i = 0; i < t.size(0); ++i) rows.append(t.select(0, i));
             return nb::iter(rows);
           })
      .def("__bool__", [](const Tensor& t) { return nb::cast<bool>(nb::bool_(item(t))); })
      .def("__float__", [](const Tensor& t) { return nb::cast<double>(nb::float_(item(t))); })
      .def("__int__", [](const Tensor& t) { return nb::int_(item(t)); })
      .def("__index__",
           [](const Tensor& t) {
             if (!is_integral(t.dtype(), true))
               throw nb::type_error("only integer tensors of a single element can be an index");
             return nb::int_(item(t));
           })
      .def("__hash__", [](const Tensor& t) { return reinterpret_cast<intptr_t>(t.impl()); })
      .def("to", &to, "A copy in another dtype and/or on another device (the tensor when it "
                      "already is there): to(dtype), to(device), to(device, dtype), to(other).")
      .def("cpu", &Tensor::cpu)
      .def("cuda", [](const Tensor& t, int index) { return t.cuda(index); }, nb::arg("device") = 0)
      .def("type_as", [](const Tensor& t, const Tensor& o) { return t.to(o.dtype()); })
      .def("float", [](const Tensor& t) { return t.to(DType::Float32); })
      .def("double", [](const Tensor& t) { return t.to(DType::Float64); })
      .def("half", [](const Tensor& t) { return t.to(DType::Float16); })
      .def("bfloat16", [](const Tensor& t) { return t.to(DType::BFloat16); })
      .def("long", [](const Tensor& t) { return t.to(DType::Int64); })
      .def("int", [](const Tensor& t) { return t.to(DType::Int32); })
      .def("bool", [](const Tensor& t) { return t.to(DType::Bool); });
  (void)m;
}

}  // namespace ember::python
