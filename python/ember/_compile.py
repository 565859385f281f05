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
import functools as _functools
import inspect as _inspect
import types as _types

from ._ember import _CompiledFunction


_SCALARS = (bool, int, float, str, type(None))
_OTHER = "<not a Python scalar>"  # what a global or captured value that is no scalar reads as


def _loaded_names(code):
    """The global names `code` and the code nested in it may load."""
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, _types.CodeType):
            names |= _loaded_names(c)
    return names


class CompiledFunction:
    """A compiled callable; .stats() gives its counters, .explain() what was captured."""

    def __init__(self, fn, fullgraph, dynamic, backend, recompile_limit):
        code = getattr(fn, "__code__", None)
        where = f" at {code.co_filename}:{code.co_firstlineno}" if code else ""
        name = getattr(fn, "__qualname__", type(fn).__name__) + where
        self._impl = _CompiledFunction(backend, fullgraph, dynamic, recompile_limit, name)
        self._orig = fn
        # The globals and closure cells whose scalar values are guarded (module docstring).
        self._globals = getattr(fn, "__globals__", None) if code else None
        self._names = sorted(_loaded_names(code)) if code else []
        self._cells = [c for c in (getattr(fn, "__closure__", None) or ())]
        orig = fn
        self._with_guards = lambda _guarded, *a, **k: orig(*a, **k)
        _functools.update_wrapper(self, fn)

    def _guarded(self):
        vals = []
        g = self._globals
        if g is not None:
            for n in self._names:
                v = g.get(n, _OTHER)
                vals.append(v if isinstance(v, _SCALARS) else _OTHER)
        for c in self._cells:
            try:
                v = c.cell_contents
            except ValueError:  # a cell not yet bound
                v = _OTHER
            vals.append(v if isinstance(v, _SCALARS) else _OTHER)
        return tuple(vals)

    def __call__(self, *args, **kwargs):
        if not self._names and not self._cells:
            return self._impl.call(self._orig, args, kwargs)
        return self._impl.call(self._with_guards, (self._guarded(),) + args, kwargs)

    def stats(self):
        return self._impl.stats()

    def explain(self):
        return self._impl.explain()

    def would_hit(self, *args, **kwargs):
        if not self._names and not self._cells:
            return self._impl.would_hit(args, kwargs)
        return self._impl.would_hit((self._guarded(),) + args, kwargs)


def compile(fn=None, *, fullgraph=False, dynamic=None, backend="compiler", mode=None,
            recompile_limit=8):
    """Compiles fn (a function taking and returning tensors); usable as @ember.compile or
    @ember.compile(fullgraph=True). `mode` is accepted for PyTorch compatibility and ignored."""
    if fn is None:
        return lambda f: compile(f, fullgraph=fullgraph, dynamic=dynamic, backend=backend,
                                 mode=mode, recompile_limit=recompile_limit)
    if not callable(fn):
        raise TypeError(f"ember.compile: expected a callable, got {type(fn).__name__}")
    if _inspect.isclass(fn):
        raise TypeError("ember.compile: pass a function or an instance, not a class")
    return CompiledFunction(fn, fullgraph, dynamic, backend, recompile_limit)
