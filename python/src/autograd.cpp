// Autograd from Python: requires_grad, .grad, backward(), detach(), and the grad mode that
// ember.no_grad() / enable_grad() (python/ember/_grad_mode.py) switch.
#include "common.h"

#include "ember/autograd.h"

namespace ember::python {

void bind_autograd(nb::module_& m, nb::class_<Tensor>& cls) {
  cls.def_prop_rw(
         "requires_grad", [](const Tensor& t) { return t.requires_grad(); },
         [](Tensor& t, bool on) { t.requires_grad_(on); })
      .def("requires_grad_",
           [](nb::pointer_and_handle<Tensor> self, bool on) -> nb::object {
             self.p->requires_grad_(on);
             return nb::borrow(self.h);
           },
           nb::arg("requires_grad") = true)
      .def_prop_ro("is_leaf", &Tensor::is_leaf)
      .def_prop_rw(
          "grad",
          [](const Tensor& t) -> nb::object {
            Tensor g = t.grad();
            if (!g.defined()) return nb::none();
            return nb::cast(g);
          },
          [](Tensor& t, nb::handle g) {
            t.set_grad(g.is_none() ? Tensor() : nb::cast<Tensor>(g));
          },
          nb::arg("value").none())
      .def("backward",
           [](const Tensor& t, std::optional<Tensor> gradient, bool retain_graph) {
             t.backward(gradient.value_or(Tensor()), retain_graph);
           },
           nb::arg("gradient") = nb::none(), nb::arg("retain_graph") = false,
           "Accumulates d(this)/d(leaf) into the .grad of every leaf that requires grad.")
      .def("detach", &Tensor::detach, "A tensor sharing storage, without autograd history.");

  m.def("is_grad_enabled", &is_grad_enabled);
  m.def("_set_grad_enabled", &set_grad_enabled, nb::arg("mode"));
  m.def("_backward",
        [](const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads,
           bool retain_graph) { backward(outputs, grads, retain_graph); },
        nb::arg("tensors"), nb::arg("grad_tensors"), nb::arg("retain_graph") = false);
}

}  // namespace ember::python
