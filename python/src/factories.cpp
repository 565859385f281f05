// Factories and random numbers with PyTorch's signatures: zeros(2, 3, dtype=..., device=...),
// arange, rand/randn/randint, manual_seed and the generator's state.
#include "common.h"

#include <nanobind/stl/pair.h>

namespace ember::python {
namespace {

// Binds name(*size, dtype=None, device=None, requires_grad=False) over make(shape, opts).
template <class Make>
void bind_sized(nb::module_& m, const char* name, Make make, const char* doc) {
  m.def(
      name,
      [make, name](nb::args size, std::optional<DType> dtype, nb::handle device, bool rg) {
        return make(shape_from_args(size, name),
                    factory_options(dtype, device, rg, default_float_dtype()));
      },
      nb::arg("size"), nb::kw_only(), nb::arg("dtype") = nb::none(),
      nb::arg("device") = nb::none(), nb::arg("requires_grad") = false, doc);
}

// zeros_like & co.: t's shape, dtype and device unless given.
TensorOptions like_options(const Tensor& t, std::optional<DType> dtype, nb::handle device,
                           bool rg) {
  TensorOptions o = factory_options(dtype, device, rg, t.dtype());
  if (device.is_none()) o.device = t.device();
  return o;
}

// Binds name(input, dtype=None, device=None, requires_grad=False) over make(shape, opts).
template <class Make>
void bind_like(nb::module_& m, const char* name, Make make) {
  m.def(
      name,
      [make](const Tensor& t, std::optional<DType> dtype, nb::handle device, bool rg) {
        return make(t.sizes(), like_options(t, dtype, device, rg));
      },
      nb::arg("input"), nb::kw_only(), nb::arg("dtype") = nb::none(),
      nb::arg("device") = nb::none(), nb::arg("requires_grad") = false);
}

}  // namespace

void bind_factories(nb::module_& m) {
  bind_sized(m, "empty", [](const Shape& s, TensorOptions o) { return empty(s, o); },
             "An uninitialized tensor.");
  bind_sized(m, "zeros", [](const Shape& s, TensorOptions o) { return zeros(s, o); },
             "A tensor of zeros.");
  bind_sized(m, "ones", [](const Shape& s, TensorOptions o) { return ones(s, o); },
             "A tensor of ones.");
  bind_sized(m, "rand", [](const Shape& s, TensorOptions o) { return rand(s, o); },
             "Uniform samples in [0, 1) from the global generator.");
  bind_sized(m, "randn", [](const Shape& s, TensorOptions o) { return randn(s, o); },
             "Standard normal samples from the global generator.");

  m.def("full",
        [](nb::handle size, nb::handle value, std::optional<DType> dtype, nb::handle device,
           bool rg) {
          // PyTorch infers the dtype from the fill value: bool, int64, or the default float.
          DType inferred = PyBool_Check(value.ptr())   ? DType::Bool
                           : PyLong_Check(value.ptr()) ? DType::Int64
                                                       : default_float_dtype();
          return full(shape_from_sequence(size, "full"), nb::cast<double>(nb::float_(value)),
                      factory_options(dtype, device, rg, inferred));
        },
        nb::arg("size"), nb::arg("fill_value"), nb::kw_only(), nb::arg("dtype") = nb::none(),
        nb::arg("device") = nb::none(), nb::arg("requires_grad") = false);
  bind_like(m, "zeros_like", [](const Shape& s, TensorOptions o) { return zeros(s, o); });
  bind_like(m, "ones_like", [](const Shape& s, TensorOptions o) { return ones(s, o); });
  bind_like(m, "empty_like", [](const Shape& s, TensorOptions o) { return empty(s, o); });
  m.def("full_like",
        [](const Tensor& t, double value, std::optional<DType> dtype, nb::handle device, bool rg) {
          return full(t.sizes(), value, like_options(t, dtype, device, rg));
        },
        nb::arg("input"), nb::arg("fill_value"), nb::kw_only(), nb::arg("dtype") = nb::none(),
        nb::arg("device") = nb::none(), nb::arg("requires_grad") = false);

  m.def("arange",
        [](nb::handle start, nb::handle end, nb::handle step, std::optional<DType> dtype,
           nb::handle device, bool rg) {
          if (end.is_none()) {
            end = start;
            start = nb::int_(0);
          }
          // int64 when every bound is an int, as PyTorch's; otherwise the default float dtype.
          const bool ints = PyLong_Check(start.ptr()) && PyLong_Check(end.ptr()) &&
                            PyLong_Check(step.ptr());
          TensorOptions o = factory_options(dtype, device, rg,
                                            ints ? DType::Int64 : default_float_dtype());
          return arange(nb::cast<double>(nb::float_(start)), nb::cast<double>(nb::float_(end)),
                        nb::cast<double>(nb::float_(step)), o);
        },
        nb::arg("start"), nb::arg("end") = nb::none(), nb::arg("step") = 1, nb::kw_only(),
        nb::arg("dtype") = nb::none(), nb::arg("device") = nb::none(),
        nb::arg("requires_grad") = false,
        "[start, end) by step; arange(n) is 0..n-1 (int64 when all bounds are ints).");

  m.def("randint",
        [](int64_t a, nb::handle b, nb::handle size, std::optional<DType> dtype,
           nb::handle device) {
          // randint(high, size) or randint(low, high, size), as PyTorch's.
          int64_t low = 0, high = a;
          if (size.is_none()) {
            size = b;
          } else {
            low = a;
            high = nb::cast<int64_t>(b);
          }
          return randint(low, high, shape_from_sequence(size, "randint"),
                         factory_options(dtype, device, false, DType::Int64));
        },
        nb::arg("low"), nb::arg("high"), nb::arg("size") = nb::none(), nb::kw_only(),
        nb::arg("dtype") = nb::none(), nb::arg("device") = nb::none(),
        "Integers in [low, high) from the global generator: randint(high, size) or "
        "randint(low, high, size).");
  m.def("manual_seed", &manual_seed, nb::arg("seed"), "Seeds the global generator.");
  m.def("initial_seed", &initial_seed, "The seed the global generator was last given.");
  // ember's generator is counter-based: its whole state is (seed, offset), not PyTorch's byte
  // tensor.
  m.def(
      "get_rng_state",
      [] {
        RngState s = get_rng_state();
        return std::make_pair(s.seed, s.offset);
      },
      "The global generator's position as (seed, offset), for set_rng_state.");
  m.def(
      "set_rng_state",
      [](std::pair<uint64_t, uint64_t> state) { set_rng_state({state.first, state.second}); },
      nb::arg("state"), "Moves the global generator back to a position get_rng_state returned.");
  m.def("multinomial", &multinomial, nb::arg("input"), nb::arg("num_samples"),
        nb::arg("replacement") = false);
  m.def("bernoulli",
        [](const Tensor& p) {
          TensorOptions o(p.dtype());
          o.device = p.device();
          return rand(p.sizes(), o).lt(p).to(p.dtype());
        },
        nb::arg("input"), "1 with probability p (elementwise), else 0.");
}

}  // namespace ember::python
