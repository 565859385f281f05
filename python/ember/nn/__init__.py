"""ember.nn: modules with PyTorch's names. A Module subclass assigns Parameters, Modules and
buffers (register_buffer) as attributes; __setattr__ records them, so parameters(),
state_dict(), train()/eval(), to() and zero_grad() walk the tree the way PyTorch's do. The
layers' math is ember's C++ ops (ember.nn.functional); this file only keeps the tree."""
from collections import OrderedDict as _OrderedDict

from .. import _ember
from .._ember import Tensor as _Tensor
from .._grad_mode import no_grad as _no_grad
from . import functional
from .modules import (Module, Parameter, ModuleList, ModuleDict, Sequential, Linear, Embedding,
                      LayerNorm, Dropout, GELU, ReLU)
from . import utils, init
