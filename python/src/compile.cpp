// ember.compile on Python callables: each call's arguments are flattened into the C++ core's
// frame (tensors, and Python numbers, bools, strings and None guarded by value), and the core
// runs the Python function under capture (holding the GIL) when it must trace, or replays the
// cached graphs without running it. python/ember/_compile.py wraps this with PyTorch's
// signature.
#include "common.h"

#include <nanobind/stl/string.h>

#include <string>

#include "ember/compile.h"

namespace ember::python {
namespace {

using detail::CallFrame;
using detail::ScalarArg;

// How results are encoded in CallFrame::out_lengths, one entry a node in prefix order: a
// tensor, None, or a tuple / list followed by its elements.
constexpr int64_t kOutTensor = -1, kOutNone = -2;
int64_t tuple_code(size_t n) { return int64_t(2 * n); }
int64_t list_code(size_t n) { return int64_t(2 * n + 1); }

// Arguments: tensors go to frame.tensors; everything else is a ScalarArg the guards compare by
// value. Containers record their length (and kind) so that their shape is guarded too.
void flatten_arg(CallFrame& f, nb::handle a, const char* where) {
  if (nb::isinstance<Tensor>(a)) {
    f.tensors.push_back(nb::cast<Tensor>(a));
  } else if (PyBool_Check(a.ptr())) {
    f.scalars.push_back(ScalarArg::make(ScalarArg::Bool, a.ptr() == Py_True));
  } else if (PyLong_Check(a.ptr())) {
    f.scalars.push_back(ScalarArg::make(ScalarArg::Int, nb::cast<int64_t>(a)));
  } else if (PyFloat_Check(a.ptr())) {
    f.scalars.push_back(ScalarArg::make(ScalarArg::Float, 0, PyFloat_AS_DOUBLE(a.ptr())));
  } else if (nb::isinstance<nb::str>(a)) {
    f.scalars.push_back(ScalarArg::make(ScalarArg::String, 0, 0, nb::cast<std::string>(a)));
  } else if (a.is_none()) {
    f.scalars.push_back(ScalarArg::make(ScalarArg::Length, kOutNone));
  } else if (nb::isinstance<nb::tuple>(a) || nb::isinstance<nb::list>(a)) {
    const size_t n = nb::len(a);
    f.scalars.push_back(ScalarArg::make(
        ScalarArg::Length, nb::isinstance<nb::tuple>(a) ? tuple_code(n) : list_code(n)));
    for (nb::handle e : a) flatten_arg(f, e, where);
  } else if (nb::isinstance<DType>(a)) {
    f.scalars.push_back(ScalarArg::make(ScalarArg::String, 0, 0,
                                        "dtype " + std::string(dtype_name(nb::cast<DType>(a)))));
  } else {
    throw nb::type_error(
        (std::string(where) + ": an argument of type " + nb::type_name(a.type()).c_str() +
         " cannot be passed to a compiled function; pass tensors, Python numbers, bools, "
         "strings, None, dtypes, or tuples/lists of those")
            .c_str());
  }
}

void flatten_result(CallFrame& f, nb::handle r, const std::string& name) {
  if (nb::isinstance<Tensor>(r)) {
    f.out_lengths.push_back(kOutTensor);
    f.outputs.push_back(nb::cast<Tensor>(r));
  } else if (r.is_none()) {
    f.out_lengths.push_back(kOutNone);
  } else if (nb::isinstance<nb::tuple>(r) || nb::isinstance<nb::list>(r)) {
    const size_t n = nb::len(r);
    f.out_lengths.push_back(nb::isinstance<nb::tuple>(r) ? tuple_code(n) : list_code(n));
    for (nb::handle e : r) flatten_result(f, e, name);
  } else {
    throw nb::type_error(("ember.compile: " + name + " returned a " +
                          nb::type_name(r.type()).c_str() +
                          "; a compiled function must return tensors, None, or tuples/lists of "
                          "those (return numbers as tensors and call .item() outside)")
                             .c_str());
  }
}

nb::object rebuild_result(const CallFrame& f, size_t& pos, size_t& code) {
  const int64_t c = f.out_lengths.at(code++);
  if (c == kOutTensor) return nb::cast(f.outputs.at(pos++));
  if (c == kOutNone) return nb::none();
  nb::list items;
  for (int64_t i = 0; i < c / 2; ++i) items.append(rebuild_result(f, pos, code));
  if (c % 2) return items;
  return nb::tuple(items);
}

nb::dict stats_dict(const CompileStats& s) {
  nb::dict d;
  d["calls"] = s.calls;
  d["traces"] = s.traces;
  d["compiles"] = s.compiles;
  d["recompiles"] = s.recompiles;
  d["breaks"] = s.breaks;
  d["cache_hits"] = s.cache_hits;
  d["replays"] = s.replays;
  d["segmented_runs"] = s.segmented_runs;
  d["eager_fallbacks"] = s.eager_fallbacks;
  d["failed_traces"] = s.failed_traces;
  d["trace_seconds"] = s.trace_seconds;
  nb::list ops;
  for (int64_t n : s.ops_per_compile) ops.append(n);
  d["ops_per_compile"] = ops;
  return d;
}

// The C++ core holding one compiled Python callable's cache. The function itself stays with
// the Python wrapper (python/ember/_compile.py), which passes it on every call: a reference
// held here would hide a cycle (function -> globals -> wrapper -> function) from Python's GC.
class PyCompiled {
 public:
  explicit PyCompiled(CompileOptions opts)
      : name_(opts.name),
        core_(std::make_unique<detail::CompiledCore>(std::move(opts),
                                                     ember::SourceLocation::current())) {}

  nb::object call(nb::handle fn, nb::tuple args, nb::dict kwargs) {
    if (!core_->enabled()) return nb::borrow(fn)(*args, **kwargs);
    CallFrame frame = flatten_call(args, kwargs);
    std::optional<nb::object> result;
    core_->call(frame, [&](CallFrame& f) {
      result = nb::borrow(fn)(*args, **kwargs);
      f.outputs.clear();
      f.out_lengths.clear();
      flatten_result(f, *result, name_);
    });
    if (result) return *result;
    size_t pos = 0, code = 0;
    return rebuild_result(frame, pos, code);
  }

  bool would_hit(nb::tuple args, nb::dict kwargs) const {
    return core_->would_hit(flatten_call(args, kwargs));
  }
  nb::dict stats() const { return stats_dict(core_->stats()); }
  std::string explain() const { return core_->explain().str(); }

 private:
  CallFrame flatten_call(const nb::tuple& args, const nb::dict& kwargs) const {
    CallFrame frame;
    for (nb::handle a : args) flatten_arg(frame, a, name_.c_str());
    // Keywords in the caller's order: the name is guarded with the value.
    for (auto [k, v] : kwargs) {
      frame.scalars.push_back(
          ScalarArg::make(ScalarArg::String, 0, 0, "kwarg " + nb::cast<std::string>(k)));
      flatten_arg(frame, v, name_.c_str());
    }
    return frame;
  }

  std::string name_;
  std::unique_ptr<detail::CompiledCore> core_;
};

}  // namespace

void bind_compile(nb::module_& m) {
  nb::class_<PyCompiled>(m, "_CompiledFunction")
      .def("__init__",
           [](PyCompiled* self, const std::string& backend, bool fullgraph,
              std::optional<bool> dynamic, int recompile_limit, const std::string& name) {
             CompileOptions opts;
             if (backend != "compiler" && backend != "eager")
               throw nb::value_error(("ember.compile: unknown backend '" + backend +
                                      "'; use 'compiler' or 'eager'").c_str());
             opts.backend = backend;
             opts.fullgraph = fullgraph;
             opts.dynamic = dynamic;
             opts.recompile_limit = recompile_limit;
             opts.name = name;
             new (self) PyCompiled(std::move(opts));
           },
           nb::arg("backend"), nb::arg("fullgraph"), nb::arg("dynamic").none(),
           nb::arg("recompile_limit"), nb::arg("name"))
      .def("call", &PyCompiled::call, nb::arg("fn"), nb::arg("args"), nb::arg("kwargs"),
           "Runs fn(*args, **kwargs) through the cache.")
      .def("would_hit", &PyCompiled::would_hit,
           "Whether a call with these arguments would be served from the cache.")
      .def("stats", &PyCompiled::stats, "The compile counters (calls, traces, recompiles ...).")
      .def("explain", &PyCompiled::explain,
           "What was captured: graphs, ops, graph breaks, recompile reasons.");
  m.def("reset_compile_caches", &reset_compile_caches,
        "Drops every compiled segment shared between callables.");
}

}  // namespace ember::python
