"""ember: a deep-learning engine with PyTorch's names. Tensors, ops and autograd run in
ember's C++ core (the extension ember._ember); this package adds the pure-Python pieces
(tensor(), no_grad, compile)."""
import os as _os

# Compiled kernels include the functor header installed beside the extension.
_include = _os.path.join(_os.path.dirname(__file__), "include")
if _os.path.isdir(_include):
    _os.environ.setdefault("EMBER_KERNEL_INCLUDE_DIR", _include)

from . import _ember
from ._ember import (Tensor, device, dtype, from_dlpack, get_default_dtype, set_default_dtype,
                     promote_types, is_grad_enabled, manual_seed, initial_seed,
                     get_rng_state, set_rng_state,
                     empty, zeros, ones, full, zeros_like, ones_like, full_like, empty_like,
                     arange, rand, randn, randint, multinomial, bernoulli,
                     where, cat, concat, stack, bmm, einsum, cumsum, sort, argsort, nonzero,
                     broadcast_to, roll, one_hot, reset_compile_caches)
from ._dtypes import (bool, int32, int64, float16, bfloat16, float32, float64, half, float,
                      double, long, int)
from ._creation import tensor, as_tensor, from_numpy
from ._grad_mode import no_grad, enable_grad, set_grad_enabled
from ._compile import compile, explain
from . import _functions
from . import data, nn, optim, safetensors

# ember.exp(x), ember.sum(x, dim) ...: the Tensor methods as functions.
for _name in _functions.TENSOR_METHODS:
    globals()[_name] = getattr(Tensor, _name)
del _name

__version__ = "0.1.0"
