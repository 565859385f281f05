"""ember.nn.utils: gradient clipping (the C++ core's clip_grad_norm_)."""
from .. import _ember


def clip_grad_norm_(parameters, max_norm):
    """Scales the grads of parameters so that their global L2 norm is at most max_norm, in
    place; returns the norm before (a 0-dim float64 tensor)."""
    if isinstance(parameters, _ember.Tensor):
        parameters = [parameters]
    return _ember._clip_grad_norm_(list(parameters), float(max_norm))
