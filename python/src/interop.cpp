// Zero-copy exchange with other array libraries on CPU and CUDA: DLPack both ways
// (ember.from_dlpack, Tensor.__dlpack__ / __dlpack_device__) and numpy views
// (Tensor.numpy(), np.asarray(t)). Memory is shared, never copied; each side keeps the other's
// owner alive.
#include "common.h"

#include <nanobind/ndarray.h>

#include <string>

namespace ember::python {
namespace {

constexpr int kDLCPU = 1, kDLCUDA = 2;

nb::dlpack::dtype to_dlpack(DType t) {
  using nb::dlpack::dtype_code;
  switch (t) {
    case DType::Bool: return {uint8_t(dtype_code::Bool), 8, 1};
    case DType::Int32: return {uint8_t(dtype_code::Int), 32, 1};
    case DType::Int64: return {uint8_t(dtype_code::Int), 64, 1};
    case DType::Float16: return {uint8_t(dtype_code::Float), 16, 1};
    case DType::BFloat16: return {uint8_t(dtype_code::Bfloat), 16, 1};
    case DType::Float32: return {uint8_t(dtype_code::Float), 32, 1};
    case DType::Float64: return {uint8_t(dtype_code::Float), 64, 1};
  }
  throw nb::type_error("unknown dtype");
}

DType from_dlpack_dtype(nb::dlpack::dtype d) {
  using nb::dlpack::dtype_code;
  const auto code = dtype_code(d.code);
  if (d.lanes == 1) {
    if (code == dtype_code::Bool && d.bits == 8) return DType::Bool;
    if (code == dtype_code::Int && d.bits == 32) return DType::Int32;
    if (code == dtype_code::Int && d.bits == 64) return DType::Int64;
    if (code == dtype_code::Float && d.bits == 16) return DType::Float16;
    if (code == dtype_code::Bfloat && d.bits == 16) return DType::BFloat16;
    if (code == dtype_code::Float && d.bits == 32) return DType::Float32;
    if (code == dtype_code::Float && d.bits == 64) return DType::Float64;
  }
  throw nb::type_error(("from_dlpack: element type (DLPack code " + std::to_string(d.code) +
                        ", " + std::to_string(d.bits) + " bits, " + std::to_string(d.lanes) +
                        " lanes) has no ember dtype; convert to bool, int32, int64, float16, "
                        "bfloat16, float32 or float64 first")
                           .c_str());
}

// An ndarray of framework F over t's memory; the returned object keeps t's storage alive.
template <class F>
nb::object export_tensor(const Tensor& t, const char* op) {
  if (t.requires_grad())
    throw nb::value_error((std::string(op) +
                           ": the tensor requires grad; call .detach() first (the exported "
                           "memory carries no autograd history)")
                              .c_str());
  std::vector<size_t> shape(t.sizes().begin(), t.sizes().end());
  nb::capsule owner(new Tensor(t), [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  const int dev = t.device().type == DeviceType::CPU ? kDLCPU : kDLCUDA;
  nb::ndarray<F> a(t.data_ptr(), shape.size(), shape.data(), owner, t.strides().data(),
                   to_dlpack(t.dtype()), dev, t.device().index);
  return nb::cast(a, nb::rv_policy::reference);
}

nb::object to_numpy(const Tensor& t) {
  if (t.device().type != DeviceType::CPU)
    throw nb::type_error(("numpy(): the tensor is on " + t.device().str() +
                          "; copy it to the host first with .cpu()")
                             .c_str());
  if (t.dtype() == DType::BFloat16)
    throw nb::type_error("numpy(): numpy has no bfloat16; convert first, e.g. t.float().numpy()");
  return export_tensor<nb::numpy>(t, "numpy()");
}

// Keeps the exporter's array alive until the last ember tensor viewing it goes.
struct ImportedStorage {
  nb::ndarray<nb::ro> array;
};

Tensor import_array(nb::ndarray<nb::ro> a) {
  const DType dtype = from_dlpack_dtype(a.dtype());
  Device device;
  if (a.device_type() == kDLCUDA)
    device = Device{DeviceType::CUDA, a.device_id()};
  else if (a.device_type() != kDLCPU)
    throw nb::type_error(("from_dlpack: DLPack device type " + std::to_string(a.device_type()) +
                          " is not supported (CPU and CUDA are)")
                             .c_str());
  auto impl = std::make_shared<TensorImpl>();
  int64_t span = 1;  // elements from the first to one past the last
  for (size_t d = 0; d < a.ndim(); ++d) {
    const int64_t n = int64_t(a.shape(d)), s = a.stride(d);
    if (s < 0)
      throw nb::value_error("from_dlpack: arrays with negative strides are not supported; pass "
                            "a copy (numpy: np.ascontiguousarray(a))");
    impl->sizes.push_back(n);
    impl->strides.push_back(s);
    if (n == 0) span = 0;
    if (span) span += (n - 1) * s;
  }
  auto* keep = new ImportedStorage{a};
  auto storage = std::shared_ptr<Storage>(new Storage, [keep](Storage* s) {
    delete s;
    // The exporter's deleter may run Python code: it needs the GIL (unless Python is gone).
    if (Py_IsInitialized() && !_Py_IsFinalizing()) {
      nb::gil_scoped_acquire gil;
      delete keep;
    }
  });
  storage->data = const_cast<void*>(a.data());
  storage->nbytes = size_t(span) * dtype_size(dtype);
  storage->device = device;
  impl->storage = std::move(storage);
  impl->dtype = dtype;
  impl->device = device;
  return Tensor(std::move(impl));
}

nb::object from_dlpack(nb::handle obj) {
  if (nb::isinstance<Tensor>(obj)) return nb::borrow(obj);
  nb::ndarray<nb::ro> a;
  if (!nb::try_cast(obj, a, false))
    throw nb::type_error(("from_dlpack: expected an object with __dlpack__ (a numpy array, a "
                          "torch tensor ...), got " +
                          std::string(nb::type_name(obj.type()).c_str()))
                             .c_str());
  return nb::cast(import_array(a));
}

}  // namespace

void bind_interop(nb::module_& m, nb::class_<Tensor>& cls) {
  m.def("from_dlpack", &from_dlpack, nb::arg("ext_tensor"),
        "A tensor sharing the memory of any object with __dlpack__ (no copy).");
  cls.def("numpy", &to_numpy, "A numpy array sharing this CPU tensor's memory (no copy).")
      .def("__array__",
           [](const Tensor& t, nb::handle dtype, nb::handle copy) {
             nb::object a = to_numpy(t);
             if (!dtype.is_none()) a = a.attr("astype")(dtype);
             return a;
           },
           nb::arg("dtype") = nb::none(), nb::arg("copy") = nb::none())
      .def("__dlpack__",
           [](const Tensor& t, nb::kwargs kwargs) {
             return export_tensor<nb::array_api>(t, "__dlpack__").attr("__dlpack__")(**kwargs);
           })
      .def("__dlpack_device__", [](const Tensor& t) {
        return nb::make_tuple(t.device().type == DeviceType::CPU ? kDLCPU : kDLCUDA,
                              t.device().index);
      });
}

}  // namespace ember::python
