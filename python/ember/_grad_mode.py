"""no_grad / enable_grad / set_grad_enabled: context managers and decorators switching the
thread's grad mode, as PyTorch's."""
import functools as _functools

from ._ember import _set_grad_enabled, is_grad_enabled


class _GradMode:
    """Sets grad mode to `self._mode` inside a with-block or a decorated function."""

    _mode = True

    def __enter__(self):
        self._prev = is_grad_enabled()
        _set_grad_enabled(self._mode)
        return self

    def __exit__(self, *exc):
        _set_grad_enabled(self._prev)
        return False

    def __call__(self, fn):
        @_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):
    """Ops inside record no autograd history."""
    _mode = False


class enable_grad(_GradMode):
    """Ops inside record autograd history (inside a no_grad block too)."""
    _mode = True


class set_grad_enabled(_GradMode):
    """Sets grad mode to `mode` now (as a function) or for a with-block."""

    def __init__(self, mode):
        self._prev = is_grad_enabled()
        self._mode = bool(mode)
        _set_grad_enabled(self._mode)

    def __enter__(self):
        return self

    def __call__(self, fn):
        mode = self._mode
        _set_grad_enabled(self._prev)

        @_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        return wrapper
