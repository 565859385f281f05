// ember.optim's core: the C++ AdamW and SGD (include/ember/optim.h) over parameter groups of
// Python tensors (a learning rate per group), gradient clipping and the cosine schedule. The
// tensors handed in share their storage with the Python objects, so the in-place updates are
// seen from Python.
// python/ember/optim.py wraps these with PyTorch's signatures.
#include "common.h"

#include <nanobind/stl/pair.h>
#include <nanobind/stl/tuple.h>

#include "ember/optim.h"

namespace ember::python {
namespace {

using Groups = std::vector<std::pair<std::vector<Tensor>, double>>;  // (params, weight_decay)

std::vector<optim::ParamGroup> to_groups(const Groups& groups) {
  std::vector<optim::ParamGroup> out;
  for (const auto& [params, wd] : groups) out.push_back(optim::ParamGroup{params, wd});
  return out;
}

template <class Cls>
void bind_common(Cls& cls) {
  using O = typename Cls::Type;
  cls.def("step", &O::step, "One update of every parameter that has a grad.")
      .def("zero_grad", &O::zero_grad, "Drops the .grad of every parameter.")
      .def("set_lr", &O::set_lr, nb::arg("lr"))
      .def_prop_ro("lr", &O::lr)
      .def(
          "set_group_lr",
          [](O& o, size_t group, std::optional<double> lr) {
            if (group >= o.groups().size())
              throw nb::index_error(("set_group_lr: group " + std::to_string(group) +
                                     " of " + std::to_string(o.groups().size()))
                                        .c_str());
            o.groups()[group].lr = lr;
          },
          nb::arg("group"), nb::arg("lr").none(),
          "Gives a group its own learning rate (None: the optimizer's, set_lr).")
      .def_prop_ro("steps", &O::steps)
      .def("state_dict", &O::state_dict, "The state as (name, tensor) pairs.")
      .def("load_state_dict", &O::load_state_dict, nb::arg("state"));
}

}  // namespace

void bind_optim(nb::module_& m) {
  nb::class_<optim::AdamW> adamw(m, "_AdamW");
  adamw.def("__init__",
            [](optim::AdamW* self, const Groups& groups, double lr, double beta1, double beta2,
               double eps) { new (self) optim::AdamW(to_groups(groups), lr, beta1, beta2, eps); },
            nb::arg("groups"), nb::arg("lr"), nb::arg("beta1"), nb::arg("beta2"), nb::arg("eps"))
      .def("set_compiled", &optim::AdamW::set_compiled, nb::arg("on"),
           "Runs each step as one compiled function over every parameter.");
  bind_common(adamw);
  nb::class_<optim::SGD> sgd(m, "_SGD");
  sgd.def("__init__",
          [](optim::SGD* self, const Groups& groups, double lr, double momentum) {
            new (self) optim::SGD(to_groups(groups), lr, momentum);
          },
          nb::arg("groups"), nb::arg("lr"), nb::arg("momentum"));
  bind_common(sgd);
  m.def("_clip_grad_norm_", &optim::clip_grad_norm_, nb::arg("parameters"),
        nb::arg("max_norm"),
        "Scales the grads so that their global L2 norm is at most max_norm; returns the norm "
        "before (a 0-dim float64 tensor).");
  m.def("_cosine_lr", &optim::cosine_lr, nb::arg("it"), nb::arg("lr"), nb::arg("min_lr"),
        nb::arg("warmup_iters"), nb::arg("decay_iters"));
}

}  // namespace ember::python
