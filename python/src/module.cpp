// The extension module ember._ember: each bind_* call adds one area of the API
// (python/ember/__init__.py re-exports it with the pure-Python helpers).
#include "common.h"

NB_MODULE(_ember, m) {
  using namespace ember::python;
  m.doc() = "ember's C++ core: tensors, ops, autograd and compile";
  bind_dtype_device(m);
  nb::class_<ember::Tensor> cls(m, "Tensor",
                                "A view of typed, strided memory on a device, with autograd.");
  bind_tensor_core(m, cls);
  bind_tensor_math(m, cls);
  bind_tensor_views(m, cls);
  bind_indexing(cls);
  bind_autograd(m, cls);
  bind_interop(m, cls);
  bind_factories(m);
  bind_functions(m);
  bind_compile(m);
  bind_optim(m);
  bind_io(m);
  bind_data(m);
}
