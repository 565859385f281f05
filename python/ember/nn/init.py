"""ember.nn.init: in-place initializers (no grad recorded)."""
from .. import _ember
from .._grad_mode import no_grad


def normal_(tensor, mean=0.0, std=1.0):
    with no_grad():
        tensor.copy_(_ember.randn(*tensor.shape, dtype=tensor.dtype, device=tensor.device) * std
                     + mean)
    return tensor


def zeros_(tensor):
    with no_grad():
        tensor.zero_()
    return tensor


def ones_(tensor):
    with no_grad():
        tensor.copy_(_ember.ones(*tensor.shape, dtype=tensor.dtype, device=tensor.device))
    return tensor
