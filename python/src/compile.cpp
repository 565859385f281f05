// ember.compile on Python callables: each call's arguments, after the values the function reads
// from its globals and closure, are flattened into the C++ core's frame (tensors, and Python
// numbers, bools, strings and None guarded by value), and the core runs the Python function
// under capture (holding the GIL) when it must trace, or replays the cached graphs without
// running it. Graph breaks are reported at the Python statement that broke.
// python/ember/_compile.py wraps this with PyTorch's signature.
#include "common.h"

#include <nanobind/stl/string.h>

#include <string>

#include "ember/compile.h"

namespace ember::python {
namespace {

using detail::CallFrame;
using detail::ScalarArg;

// How results are encoded in CallFrame::out_lengths, one entry a node in prefix order: a
// tensor, None, or a tuple / list followed by its elements. The same codes, as Length scalars,
// stand for None and containers among the arguments, and kNotScalar for a global or closure
// value that is no Python number, string, bool or None.
constexpr int64_t kOutTensor = -1, kOutNone = -2, kNotScalar = -3;
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
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(a.ptr(), &overflow);
    if (overflow)  // beyond int64: guarded by its digits
      f.scalars.push_back(
          ScalarArg::make(ScalarArg::String, 0, 0, "int " + nb::cast<std::string>(nb::str(a))));
    else
      f.scalars.push_back(ScalarArg::make(ScalarArg::Int, v));
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

// A value the function reads from its globals or closure (null: unbound): guarded by value
// when it is a Python number, string, bool or None, else only as being none of those.
void flatten_read_value(CallFrame& f, PyObject* v, const char* where) {
  if (v && (v == Py_None || PyBool_Check(v) || PyLong_Check(v) || PyFloat_Check(v) ||
            PyUnicode_Check(v)))
    flatten_arg(f, v, where);
  else
    f.scalars.push_back(ScalarArg::make(ScalarArg::Length, kNotScalar));
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

// The directory of the ember package, "/.../ember/" (its own frames are not the user's).
const std::string& package_dir() {
  static const std::string dir = [] {
    std::string f = nb::cast<std::string>(nb::module_::import_("ember").attr("__file__"));
    return f.substr(0, f.find_last_of('/') + 1);
  }();
  return dir;
}

// "file.py:line" of the innermost Python frame outside the ember package: the statement whose
// op broke the graph (the op's binding runs in no frame of its own). "" without one.
std::string python_position() {
  if (!PyGILState_Check()) return "";
  PyFrameObject* frame = PyEval_GetFrame();
  Py_XINCREF(frame);
  std::string where;
  while (frame && where.empty()) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const std::string file = nb::cast<std::string>(nb::handle(code->co_filename));
    Py_DECREF(code);
    if (file.compare(0, package_dir().size(), package_dir()) != 0)
      where = file + ":" + std::to_string(PyFrame_GetLineNumber(frame));
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  return where;
}

nb::dict explain_dict(const ExplainReport& r) {
  nb::dict d;
  d["name"] = r.name;
  d["text"] = r.str();
  d["graph_count"] = r.graph_count;
  nb::list ops, graphs, breaks, guards, recompiles;
  for (int64_t n : r.ops_per_graph) ops.append(n);
  for (const std::string& g : r.graphs) graphs.append(g);
  for (const GraphBreakInfo& b : r.breaks)
    breaks.append(nb::make_tuple(b.reason, b.op, b.location, b.hint));
  for (const std::string& g : r.guards) guards.append(g);
  for (const std::string& w : r.recompile_reasons) recompiles.append(w);
  d["ops_per_graph"] = ops;
  d["graphs"] = graphs;
  d["breaks"] = breaks;
  d["guards"] = guards;
  d["recompile_reasons"] = recompiles;
  return d;
}

// The C++ core holding one compiled Python callable's cache. The function itself stays with
// the Python wrapper (python/ember/_compile.py), which passes it on every call: a reference
// held here would hide a cycle (function -> globals -> wrapper -> function) from Python's GC.
class PyCompiled {
 public:
  // `globals`: the names of the globals the function loads, whose values are guarded.
  PyCompiled(CompileOptions opts, std::vector<nb::str> globals)
      : name_(opts.name),
        globals_(std::move(globals)),
        core_(std::make_unique<detail::CompiledCore>(std::move(opts),
                                                     ember::SourceLocation::current())) {}

  nb::object call(nb::handle fn, nb::tuple args, nb::dict kwargs) {
    if (!core_->enabled()) return nb::borrow(fn)(*args, **kwargs);
    CallFrame frame = flatten_call(fn, args, kwargs);
    detail::SourcePositionScope at(&python_position);  // breaks at the Python statement
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

  bool would_hit(nb::handle fn, nb::tuple args, nb::dict kwargs) const {
    return core_->would_hit(flatten_call(fn, args, kwargs));
  }
  nb::dict stats() const { return stats_dict(core_->stats()); }
  nb::dict explain() const { return explain_dict(core_->explain()); }

 private:
  // The frame of a call: the values fn reads from its globals and closure, then the arguments.
  CallFrame flatten_call(nb::handle fn, const nb::tuple& args, const nb::dict& kwargs) const {
    CallFrame frame;
    PyObject* func = PyMethod_Check(fn.ptr()) ? PyMethod_GET_FUNCTION(fn.ptr()) : fn.ptr();
    if (PyFunction_Check(func)) {
      PyObject* globals = PyFunction_GET_GLOBALS(func);
      for (const nb::str& n : globals_) {
        PyObject* v = PyDict_GetItemWithError(globals, n.ptr());  // borrowed
        if (!v && PyErr_Occurred()) throw nb::python_error();
        flatten_read_value(frame, v, name_.c_str());
      }
      if (PyObject* cells = PyFunction_GET_CLOSURE(func))
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(cells); ++i)
          flatten_read_value(frame, PyCell_GET(PyTuple_GET_ITEM(cells, i)), name_.c_str());
    }
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
  std::vector<nb::str> globals_;
  std::unique_ptr<detail::CompiledCore> core_;
};

}  // namespace

void bind_compile(nb::module_& m) {
  nb::class_<PyCompiled>(m, "_CompiledFunction")
      .def("__init__",
           [](PyCompiled* self, const std::string& backend, bool fullgraph,
              std::optional<bool> dynamic, int recompile_limit, const std::string& name,
              std::vector<nb::str> globals, const std::string& mode) {
             CompileOptions opts;
             if (backend != "compiler" && backend != "eager")
               throw nb::value_error(("ember.compile: unknown backend '" + backend +
                                      "'; use 'compiler' or 'eager'").c_str());
             if (mode != "default" && mode != "reduce-overhead")
               throw nb::value_error(("ember.compile: unknown mode '" + mode +
                                      "'; use 'default' or 'reduce-overhead'").c_str());
             opts.backend = backend;
             opts.mode = mode;
             opts.fullgraph = fullgraph;
             opts.dynamic = dynamic;
             opts.recompile_limit = recompile_limit;
             opts.name = name;
             new (self) PyCompiled(std::move(opts), std::move(globals));
           },
           nb::arg("backend"), nb::arg("fullgraph"), nb::arg("dynamic").none(),
           nb::arg("recompile_limit"), nb::arg("name"), nb::arg("globals"),
           nb::arg("mode") = "default")
      .def("call", &PyCompiled::call, nb::arg("fn"), nb::arg("args"), nb::arg("kwargs"),
           "Runs fn(*args, **kwargs) through the cache; the values fn reads from the globals "
           "named at construction and from its closure are guarded with the arguments.")
      .def("would_hit", &PyCompiled::would_hit, nb::arg("fn"), nb::arg("args"),
           nb::arg("kwargs"), "Whether call(fn, args, kwargs) would be served from the cache.")
      .def("stats", &PyCompiled::stats, "The compile counters (calls, traces, recompiles ...).")
      .def("explain", &PyCompiled::explain,
           "What was captured: graphs, ops, graph breaks, guards, recompile reasons (a dict).");
  m.def("reset_compile_caches", &reset_compile_caches,
        "Drops every compiled segment shared between callables.");
}

}  // namespace ember::python
