// ember.Tensor's shape ops: views that share storage (view, permute, transpose, expand,
// squeeze ...), and the copies, splits and gathers beside them.
#include "common.h"

namespace ember::python {
namespace {

Shape perm_from_args(const nb::args& args) { return shape_from_args(args, "permute"); }

nb::list tensor_list(const std::vector<Tensor>& v) {
  nb::list l;
  for (const Tensor& t : v) l.append(nb::cast(t));
  return l;
}

}  // namespace

void bind_tensor_views(nb::module_& m, nb::class_<Tensor>& cls) {
  cls.def("view", [](const Tensor& t, nb::args shape) {
       if (shape.size() == 1 && nb::isinstance<DType>(shape[0]))
         throw nb::type_error("view(dtype) is not supported; use .to(dtype) for a converted copy");
       return t.view(shape_from_args(shape, "view"));
     })
      .def("reshape", [](const Tensor& t, nb::args shape) {
        return t.reshape(shape_from_args(shape, "reshape"));
      })
      .def("view_as", [](const Tensor& t, const Tensor& o) { return t.view(o.sizes()); })
      .def("reshape_as", [](const Tensor& t, const Tensor& o) { return t.reshape(o.sizes()); })
      .def("permute", [](const Tensor& t, nb::args dims) { return t.permute(perm_from_args(dims)); })
      .def("transpose", &Tensor::transpose, nb::arg("dim0"), nb::arg("dim1"))
      .def("t", &Tensor::t)
      .def_prop_ro("T", [](const Tensor& t) {
        Shape rev;
        for (int64_t d = t.dim() - 1; d >= 0; --d) rev.push_back(d);
        return t.permute(rev);
      })
      .def_prop_ro("mT", [](const Tensor& t) { return t.transpose(-2, -1); })
      .def("expand", [](const Tensor& t, nb::args shape) {
        return t.expand(shape_from_args(shape, "expand"));
      })
      .def("expand_as", &Tensor::expand_as)
      .def("narrow", &Tensor::narrow, nb::arg("dim"), nb::arg("start"), nb::arg("length"))
      .def("select", &Tensor::select, nb::arg("dim"), nb::arg("index"))
      .def("squeeze", [](const Tensor& t, std::optional<int64_t> dim) {
        return dim ? t.squeeze(*dim) : t.squeeze();
      }, nb::arg("dim") = nb::none())
      .def("unsqueeze", &Tensor::unsqueeze, nb::arg("dim"))
      .def("flatten", &Tensor::flatten, nb::arg("start_dim") = 0, nb::arg("end_dim") = -1)
      .def("contiguous", &Tensor::contiguous)
      .def("clone", &Tensor::clone)
      .def("split", [](const Tensor& t, nb::handle size, int64_t dim) {
        if (PyIndex_Check(size.ptr())) return tensor_list(t.split(nb::cast<int64_t>(size), dim));
        return tensor_list(t.split_with_sizes(shape_from_sequence(size, "split"), dim));
      }, nb::arg("split_size_or_sections"), nb::arg("dim") = 0)
      .def("chunk", [](const Tensor& t, int64_t chunks, int64_t dim) {
        return tensor_list(t.chunk(chunks, dim));
      }, nb::arg("chunks"), nb::arg("dim") = 0)
      .def("unbind", [](const Tensor& t, int64_t dim) {
        nb::list l;
        for (int64_t i = 0; i < t.size(dim); ++i) l.append(t.select(dim, i));
        return nb::tuple(l);
      }, nb::arg("dim") = 0)
      .def("index_select", &Tensor::index_select, nb::arg("dim"), nb::arg("index"))
      .def("gather", &Tensor::gather, nb::arg("dim"), nb::arg("index"))
      .def("tril", &Tensor::tril, nb::arg("diagonal") = 0)
      .def("triu", &Tensor::triu, nb::arg("diagonal") = 0);
  (void)m;
}

}  // namespace ember::python
