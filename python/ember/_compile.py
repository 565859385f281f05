"""ember.compile(fn): capture the ember ops a Python function runs into graphs, guard what the
capture assumed, and replay the cached graphs on later calls (the C++ core in
src/capture; see docs/compiling.md). What a replay assumes, from Python:

- Guarded (a change traces again): each tensor argument's dtype, shape, strides, device and
  requires_grad; every Python number, bool, string, None and dtype argument by value (and the
  lengths of tuples/lists of arguments); keyword names; grad mode and the default dtype.
- Python numbers, bools, strings and None that the function reads from its globals (the names
  its code, and the code of functions and comprehensions nested in it, loads) or from its
  closure are guarded by value too: a changed global or captured number traces again instead
  of replaying the old value. Other objects read that way (modules, functions, lists) are
  guarded only by being some object that is not such a scalar.
- Not guarded: what the function reads through attributes or containers (`cfg.lr`,
  `params["scale"]`), and Python control flow on anything but the arguments and the values
  above.
- Tensors the function reads from globals or closures are read again on replay (their current
  contents); rebinding such a global to a new tensor while the old one stays alive elsewhere is
  not seen.
"""
import dis as _dis
import functools as _functools
import inspect as _inspect
import re as _re
import types as _types
from typing import NamedTuple as _NamedTuple

from ._ember import _CompiledFunction


_GLOBAL_LOADS = ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS")


def _loaded_names(code):
    """The global names `code` and the code nested in it load (attribute names, also in
    co_names, are not looked up in the globals)."""
    names = {i.argval for i in _dis.get_instructions(code) if i.opname in _GLOBAL_LOADS}
    for c in code.co_consts:
        if isinstance(c, _types.CodeType):
            names |= _loaded_names(c)
    return names


class GraphBreak(_NamedTuple):
    """One graph break: why, the op, where ("file.py:42", the Python statement), and a hint."""
    reason: str
    op: str
    location: str
    hint: str


class ExplainOutput:
    """What a compiled function captured on its first trace: its graphs (printed), the ops in
    each, the graph breaks with the Python file:line of the statement that broke, the guards a
    later call must pass to replay, and why it was traced again (recompile_reasons). str() gives
    the report as text."""

    def __init__(self, report, labels):
        self.name = report["name"]
        self.graphs = list(report["graphs"])
        self.graph_count = report["graph_count"]
        self.ops_per_graph = list(report["ops_per_graph"])
        self.op_count = sum(self.ops_per_graph)
        self.breaks = [GraphBreak(*b) for b in report["breaks"]]
        self.graph_break_count = len(self.breaks)
        self.guards = [_python_guard(g, labels) for g in report["guards"]]
        self.recompile_reasons = [_python_guard(r, labels) for r in report["recompile_reasons"]]
        # The core's text up to its guards and recompiles, which are given here relabeled.
        self._text = _re.split(r"^(?:guards|recompiles):$", report["text"], maxsplit=1,
                               flags=_re.M)[0]
        if self.guards:
            self._text += "guards:\n" + "".join(f"  - {g}\n" for g in self.guards)
        if self.recompile_reasons:
            self._text += "recompiles:\n" + "".join(f"  - {r}\n" for r in self.recompile_reasons)

    def __str__(self):
        return self._text

    def __repr__(self):
        return self._text


# The core's words for a non-tensor argument, in a guard ("argument 3 == 2.5") or a miss
# ("non-tensor argument 3: expected 2.5, got 3"), and for the lengths and None it encodes as
# numbers (python/src/compile.cpp: a tuple of n is 2n, a list 2n + 1, None -2, a global or
# closure value of another type -3).
_ARG = _re.compile(r"(non-tensor )?argument (\d+)")
_LENGTH = _re.compile(r"a vector of (-?\d+) tensors")
_BOOL = _re.compile(r"\b(true|false)\b")


def _python_value(m):
    n = int(m.group(1))
    if n < 0:
        return "None" if n == -2 else "<not a number, string, bool or None>"
    return f"a {'list' if n % 2 else 'tuple'} of {n // 2}"


def _python_guard(line, labels):
    """A guard or miss reason of the core in Python's terms: the globals and closure values by
    name (labels), the other non-tensor arguments counted after them."""
    def name(m):
        i = int(m.group(2))
        return labels[i] if i < len(labels) else f"non-tensor argument {i - len(labels)}"
    line = _ARG.sub(name, line, count=1)
    line = _LENGTH.sub(_python_value, line)
    return _BOOL.sub(lambda m: m.group(0).capitalize(), line)


class CompiledFunction:
    """A compiled callable; .stats() gives its counters, .explain() what was captured."""

    def __init__(self, fn, fullgraph, dynamic, backend, recompile_limit, mode="default"):
        code = getattr(fn, "__code__", None)
        where = f" at {code.co_filename}:{code.co_firstlineno}" if code else ""
        name = getattr(fn, "__qualname__", type(fn).__name__) + where
        # The globals whose values are guarded (module docstring); the core reads them, and
        # the closure's cells, from the function on every call (python/src/compile.cpp).
        names = sorted(_loaded_names(code)) if code else []
        self._impl = _CompiledFunction(backend, fullgraph, dynamic, recompile_limit, name, names,
                                       mode)
        self._orig = fn
        # What explain() calls the guarded values, in the order the core reads them.
        self._labels = ([f"global {n}" for n in names] +
                        [f"closure variable {n}" for n in (code.co_freevars if code else ())])
        _functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        return self._impl.call(self._orig, args, kwargs)

    def stats(self):
        return self._impl.stats()

    def explain(self):
        """What was captured (an ExplainOutput): graphs, breaks, guards, recompiles."""
        return ExplainOutput(self._impl.explain(), self._labels)

    def would_hit(self, *args, **kwargs):
        return self._impl.would_hit(self._orig, args, kwargs)


class CompiledModule(CompiledFunction):
    """ember.compile(module): calls the module with the training flags of it and its
    submodules passed as a guarded argument, so that train() / eval() picks (or traces) the
    graph of that mode instead of replaying the other. The flags are read again only after a
    train() or eval() somewhere. Other attributes are the module's (compiled.parameters())."""

    def __init__(self, module, fullgraph, dynamic, backend, recompile_limit, mode="default"):
        def call_module(modes, *args, **kwargs):
            return module(*args, **kwargs)
        call_module.__qualname__ = type(module).__name__ + ".forward"
        super().__init__(call_module, fullgraph, dynamic, backend, recompile_limit, mode)
        self.__dict__["_orig_mod"] = module
        self._modes_version = None
        self._modes = ()

    def _with_modes(self, args):
        from .nn import modules
        if self._modes_version != modules._mode_version[0]:
            self._modes = tuple(m.training for m in self._orig_mod.modules())
            self._modes_version = modules._mode_version[0]
        return (self._modes,) + args

    def __call__(self, *args, **kwargs):
        return self._impl.call(self._orig, self._with_modes(args), kwargs)

    def would_hit(self, *args, **kwargs):
        return self._impl.would_hit(self._orig, self._with_modes(args), kwargs)

    def __getattr__(self, name):
        return getattr(self.__dict__["_orig_mod"], name)


def compile(fn=None, *, fullgraph=False, dynamic=None, backend="compiler", mode=None,
            recompile_limit=8):
    """Compiles fn (a function taking and returning tensors); usable as @ember.compile or
    @ember.compile(fullgraph=True). mode: None or "default", or "reduce-overhead" (on a GPU,
    each compiled graph replays as a recorded CUDA graph; docs/compiling.md, "CUDA graphs")."""
    if fn is None:
        return lambda f: compile(f, fullgraph=fullgraph, dynamic=dynamic, backend=backend,
                                 mode=mode, recompile_limit=recompile_limit)
    if not callable(fn):
        raise TypeError(f"ember.compile: expected a callable, got {type(fn).__name__}")
    if _inspect.isclass(fn):
        raise TypeError("ember.compile: pass a function or an instance, not a class")
    if mode is None:
        mode = "default"
    if mode not in ("default", "reduce-overhead"):
        raise ValueError(f"ember.compile: unknown mode {mode!r}; use 'default' or "
                         "'reduce-overhead'")
    from .nn import Module
    if isinstance(fn, Module):
        return CompiledModule(fn, fullgraph, dynamic, backend, recompile_limit, mode)
    return CompiledFunction(fn, fullgraph, dynamic, backend, recompile_limit, mode)


def explain(fn, *args, **kwargs):
    """ember.explain(fn)(*args, **kwargs): compiles fn afresh (backend "compiler", graph breaks
    allowed), calls it once with the arguments and returns an ExplainOutput: the graphs it
    captured, each graph break with the Python file:line of the statement that broke, and the
    guards a later call must pass to replay. explain(fn, *args) runs at once, as
    torch._dynamo.explain's older form does."""
    def run(*a, **k):
        cf = compile(fn)
        cf(*a, **k)
        return cf.explain()
    return run(*args, **kwargs) if args or kwargs else run
