// Free functions over several tensors (ember.cat, ember.where, ember.matmul ...) and the
// functional forms of the layers (softmax, layer_norm, cross_entropy, attention ...).
// Single-tensor ops are also reachable as ember.exp(x) etc.: python/ember/__init__.py aliases
// the Tensor methods.
#include "common.h"

#include <nanobind/stl/pair.h>

namespace ember::python {

void bind_functions(nb::module_& m) {
  m.def("where",
        [](const Tensor& cond, nb::handle a, nb::handle b) {
          return where(cond, operand_or_throw(a, cond, "where"), operand_or_throw(b, cond, "where"));
        },
        nb::arg("condition"), nb::arg("input"), nb::arg("other"));
  m.def("cat", &cat, nb::arg("tensors"), nb::arg("dim") = 0);
  m.def("concat", &cat, nb::arg("tensors"), nb::arg("dim") = 0);
  m.def("stack", &stack, nb::arg("tensors"), nb::arg("dim") = 0);
  m.def("bmm", &bmm, nb::arg("input"), nb::arg("mat2"));
  m.def("einsum", [](const std::string& eq, nb::args operands) {
    std::vector<Tensor> ops;
    for (nb::handle h : operands) ops.push_back(nb::cast<Tensor>(h));
    return einsum(eq, ops);
  }, nb::arg("equation"), nb::arg("operands"));
  m.def("cumsum", &cumsum, nb::arg("input"), nb::arg("dim"));
  m.def("sort", &sort, nb::arg("input"), nb::arg("dim") = -1, nb::arg("descending") = false);
  m.def("argsort", &argsort, nb::arg("input"), nb::arg("dim") = -1, nb::arg("descending") = false);
  m.def("nonzero", [](const Tensor& x) { return nonzero(x); }, nb::arg("input"));
  m.def("broadcast_to", &broadcast_to, nb::arg("input"), nb::arg("size"));
  m.def("roll", &roll, nb::arg("input"), nb::arg("shifts"), nb::arg("dims") = std::vector<int64_t>{});
  m.def("one_hot", &one_hot, nb::arg("tensor"), nb::arg("num_classes") = -1);
  m.def("dropout", &dropout, nb::arg("input"), nb::arg("p") = 0.5, nb::arg("training") = true);
  m.def("linear", &linear, nb::arg("input"), nb::arg("weight"), nb::arg("bias") = Tensor());
  m.def("embedding", [](const Tensor& idx, const Tensor& w) { return embedding(w, idx); },
        nb::arg("input"), nb::arg("weight"));
  m.def("layer_norm",
        [](const Tensor& x, const Shape& shape, std::optional<Tensor> w, std::optional<Tensor> b,
           double eps) { return layer_norm(x, shape, w.value_or(Tensor()), b.value_or(Tensor()), eps); },
        nb::arg("input"), nb::arg("normalized_shape"), nb::arg("weight") = nb::none(),
        nb::arg("bias") = nb::none(), nb::arg("eps") = 1e-5);
  m.def("cross_entropy", &cross_entropy, nb::arg("input"), nb::arg("target"),
        nb::arg("ignore_index") = -100);
  m.def("scaled_dot_product_attention",
        [](const Tensor& q, const Tensor& k, const Tensor& v, nb::handle mask, double p,
           bool causal, std::optional<double> scale) {
          if (!mask.is_none())
            throw nb::value_error("scaled_dot_product_attention: attn_mask is not supported; "
                                  "use is_causal=True or mask the scores explicitly");
          return scaled_dot_product_attention(q, k, v, causal, p, scale);
        },
        nb::arg("query"), nb::arg("key"), nb::arg("value"), nb::arg("attn_mask") = nb::none(),
        nb::arg("dropout_p") = 0.0, nb::arg("is_causal") = false, nb::kw_only(),
        nb::arg("scale") = nb::none());
}

}  // namespace ember::python
