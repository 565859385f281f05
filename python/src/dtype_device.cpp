// ember.dtype (ember.float32 ...) and ember.device, with PyTorch's spellings.
#include "common.h"

#include <string>

#include "ember/device.h"

namespace ember::python {

void bind_dtype_device(nb::module_& m) {
  nb::enum_<DType>(m, "dtype", "Element type of a tensor (ember.float32, ember.int64 ...).")
      .value("bool", DType::Bool)
      .value("int32", DType::Int32)
      .value("int64", DType::Int64)
      .value("float16", DType::Float16)
      .value("bfloat16", DType::BFloat16)
      .value("float32", DType::Float32)
      .value("float64", DType::Float64);

  m.def("_dtype_repr", [](DType t) { return "ember." + std::string(dtype_name(t)); });
  m.def("_dtype_itemsize", [](DType t) { return dtype_size(t); });
  m.def("_dtype_is_floating_point", [](DType t) { return is_floating(t); });
  m.def("get_default_dtype", &default_float_dtype,
        "The dtype of float tensors made without one (float32 unless changed).");
  m.def("set_default_dtype", &set_default_float_dtype, nb::arg("dtype"),
        "Sets the dtype of float tensors made without one.");
  m.def("promote_types", &promote_types, nb::arg("type1"), nb::arg("type2"),
        "The dtype two tensors of these dtypes combine into, as PyTorch's.");

  nb::class_<Device>(m, "device", "Where a tensor's storage lives: 'cpu' or 'cuda:N'.")
      .def("__init__", [](Device* d, const std::string& s) { new (d) Device(parse_device(s)); },
           nb::arg("type"))
      .def("__init__",
           [](Device* d, const std::string& type, int index) {
             new (d) Device(parse_device(type + ":" + std::to_string(index)));
           },
           nb::arg("type"), nb::arg("index"))
      .def_prop_ro("type", [](const Device& d) { return d.type == DeviceType::CPU ? "cpu" : "cuda"; })
      .def_prop_ro("index",
                   [](const Device& d) -> nb::object {
                     if (d.type == DeviceType::CPU) return nb::none();
                     return nb::int_(d.index);
                   })
      .def("__str__", &Device::str)
      .def("__repr__",
           [](const Device& d) {
             if (d.type == DeviceType::CPU) return std::string("device(type='cpu')");
             return "device(type='cuda', index=" + std::to_string(d.index) + ")";
           })
      .def("__eq__",
           [](const Device& d, nb::handle o) {
             try {
               auto other = device_arg(o);
               return other && *other == d;
             } catch (const std::exception&) {
               return false;
             }
           })
      .def("__hash__", [](const Device& d) { return int(d.type) * 1000 + d.index; });
}

}  // namespace ember::python
