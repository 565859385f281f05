"""ember.compile(fn): capture the ember ops a Python function runs into graphs, guard what the
capture assumed, and replay the cached graphs on later calls (the C++ core in
src/capture; see docs/compiling.md). What a replay assumes, from Python:

- Guarded (a change traces again): each tensor argument's dtype, shape, strides, device and
  requires_grad; every Python number, bool, string, None and dtype argument by value (and the
  lengths of tuples/lists of arguments); keyword names; grad mode and the default dtype.
- Not guarded yet: Python globals and closure variables that are not tensors (a changed
  global number is replayed with its old value: pass it as an argument), and Python control
  flow on anything but the arguments.
- Tensors the function reads from globals or closures are read again on replay (their current
  contents); rebinding such a global to a new tensor while the old one stays alive elsewhere is
  not seen.
"""
import functools as _functools
import inspect as _inspect

from ._ember import _CompiledFunction


class CompiledFunction:
    """A compiled callable; .stats() gives its counters, .explain() what was captured."""

    def __init__(self, fn, fullgraph, dynamic, backend, recompile_limit):
        code = getattr(fn, "__code__", None)
        where = f" at {code.co_filename}:{code.co_firstlineno}" if code else ""
        name = getattr(fn, "__qualname__", type(fn).__name__) + where
        self._impl = _CompiledFunction(backend, fullgraph, dynamic, recompile_limit, name)
        self._orig = fn
        _functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        return self._impl.call(self._orig, args, kwargs)

    def stats(self):
        return self._impl.stats()

    def explain(self):
        return self._impl.explain()

    def would_hit(self, *args, **kwargs):
        return self._impl.would_hit(args, kwargs)


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
