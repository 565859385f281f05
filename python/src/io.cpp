// safetensors files from Python: io::save_safetensors / load_safetensors over (name, tensor)
// lists. python/ember/safetensors.py gives them safetensors' save_file / load_file names.
#include "common.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>

#include "ember/io.h"

namespace ember::python {

void bind_io(nb::module_& m) {
  m.def("_save_safetensors", &io::save_safetensors, nb::arg("path"), nb::arg("tensors"),
        nb::arg("metadata"), "Writes (name, CPU tensor) pairs and string metadata atomically.");
  m.def("_load_safetensors",
        [](const std::string& path) {
          io::TensorFile f = io::load_safetensors(path);
          return std::make_pair(std::move(f.tensors), std::move(f.metadata));
        },
        nb::arg("path"), "((name, tensor) pairs in the file's order, metadata).");
}

}  // namespace ember::python
