"""ember.nn's Module tree and layers (see ember/nn/__init__.py)."""
import math
from collections import OrderedDict

from .. import _ember
from .._ember import Tensor
from .._grad_mode import no_grad
from . import functional as F


# Bumped by every train() / eval(): compiled modules read their training flags again after it.
_mode_version = [0]


class _ParameterMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.requires_grad and obj.is_leaf


class Parameter(metaclass=_ParameterMeta):
    """Parameter(t) is t's storage as a leaf tensor that requires grad (ember tensors are one
    class: a Parameter is an ember.Tensor, and isinstance(x, Parameter) holds for every leaf
    tensor that requires grad). Assigned to a Module attribute, it is registered."""

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = _ember.empty(0)
        return data.detach().requires_grad_(requires_grad)


class Module:
    """Base class of layers and models: subclasses call super().__init__() and assign
    parameters, submodules and buffers as attributes, and define forward()."""

    def __init__(self):
        d = self.__dict__
        d["_parameters"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_non_persistent"] = set()
        d["_modules"] = OrderedDict()
        d["training"] = True

    # ---- registration ----
    def __setattr__(self, name, value):
        d = self.__dict__
        params = d.get("_parameters")
        if params is None:
            raise AttributeError(f"{type(self).__name__}: call super().__init__() before "
                                 f"assigning attributes ('{name}')")
        buffers, modules = d["_buffers"], d["_modules"]
        if isinstance(value, Module):
            params.pop(name, None)
            buffers.pop(name, None)
            d.pop(name, None)
            modules[name] = value
        elif isinstance(value, Tensor) and (name in params or isinstance(value, Parameter)):
            buffers.pop(name, None)
            modules.pop(name, None)
            d.pop(name, None)
            params[name] = value
        elif name in buffers and (value is None or isinstance(value, Tensor)):
            buffers[name] = value
        elif value is None and name in params:
            params[name] = None
        else:
            params.pop(name, None)
            modules.pop(name, None)
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            t = d.get(table)
            if t is not None and name in t:
                return t[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name, param):
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """A tensor that moves with to() and, when persistent, is saved in state_dict()."""
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)

    def add_module(self, name, module):
        self._modules[name] = module

    # ---- calling ----
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} defines no forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ---- walking the tree ----
    def named_modules(self, prefix=""):
        seen = set()
        stack = [(prefix, self)]
        while stack:
            name, m = stack.pop(0)
            if id(m) in seen:
                continue
            seen.add(id(m))
            yield name, m
            stack[0:0] = [((f"{name}.{k}" if name else k), c)
                          for k, c in m._modules.items() if c is not None]

    def modules(self):
        return (m for _, m in self.named_modules())

    def named_children(self):
        return ((k, c) for k, c in self._modules.items() if c is not None)

    def children(self):
        return (c for _, c in self.named_children())

    def _named_tensors(self, table, dedup):
        seen = set()
        for prefix, m in self.named_modules():
            for k, t in getattr(m, table).items():
                if t is None or (dedup and id(t) in seen):
                    continue
                seen.add(id(t))
                yield (f"{prefix}.{k}" if prefix else k), t

    def named_parameters(self):
        """(dotted name, parameter) pairs; a tied parameter appears once, under its first name."""
        return self._named_tensors("_parameters", True)

    def parameters(self):
        return (p for _, p in self.named_parameters())

    def named_buffers(self):
        return self._named_tensors("_buffers", True)

    def buffers(self):
        return (b for _, b in self.named_buffers())

    # ---- modes and grads ----
    def train(self, mode=True):
        _mode_version[0] += 1
        for m in self.modules():
            m.__dict__["training"] = bool(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            p.grad = None

    # ---- state ----
    def state_dict(self, destination=None, prefix=""):
        """Every parameter and persistent buffer by dotted name (tied ones under each name),
        detached from autograd, sharing storage with the module."""
        out = OrderedDict() if destination is None else destination
        for name, m in self.named_modules():
            base = prefix + (name + "." if name else "")
            for k, p in m._parameters.items():
                if p is not None:
                    out[base + k] = p.detach()
            for k, b in m._buffers.items():
                if b is not None and k not in m._non_persistent:
                    out[base + k] = b.detach()
        return out

    def load_state_dict(self, state_dict, strict=True):
        """Copies values into the module's own tensors (keys written by a compiled wrapper,
        '_orig_mod.' prefixed, are accepted). strict: any missing or unexpected key, or a
        shape mismatch, raises before anything is changed. Returns (missing, unexpected)."""
        own = self.state_dict()
        given = {}
        for k, v in state_dict.items():
            given[k[len("_orig_mod."):] if k.startswith("_orig_mod.") else k] = v
        missing = [k for k in own if k not in given]
        unexpected = [k for k in given if k not in own]
        mismatched = [f"{k}: expected {list(own[k].shape)}, got {list(given[k].shape)}"
                      for k in own if k in given and list(own[k].shape) != list(given[k].shape)]
        if mismatched or (strict and (missing or unexpected)):
            raise RuntimeError("load_state_dict: " + "; ".join(
                [f"missing {missing}"] * bool(missing) + [f"unexpected {unexpected}"] *
                bool(unexpected) + mismatched))
        with no_grad():
            for k, t in own.items():
                if k in given:
                    v = given[k]
                    if not isinstance(v, Tensor):
                        v = _ember.from_dlpack(v) if hasattr(v, "__dlpack__") else v
                    t.copy_(v)
        return missing, unexpected

    def _convert(self, fn):
        done = {}
        for m in self.modules():
            for table in (m._parameters, m._buffers):
                for k, t in table.items():
                    if t is None:
                        continue
                    if id(t) not in done:
                        with no_grad():
                            n = fn(t).detach()
                        if table is m._parameters:
                            n.requires_grad_(t.requires_grad)
                        done[id(t)] = n
                    table[k] = done[id(t)]
        return self

    def to(self, device=None, dtype=None):
        """Moves (and/or converts the floating tensors of) every parameter and buffer; tied
        tensors stay tied; grads are dropped. Make optimizers after moving."""
        if isinstance(device, _ember.dtype):
            device, dtype = None, device
        def conv(t):
            if dtype is not None and t.is_floating_point():
                t = t.to(dtype)
            return t.to(device) if device is not None else t.clone()
        return self._convert(conv)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to("cuda" if device is None else f"cuda:{device}")

    def float(self):
        return self.to(dtype=_ember.float32)

    def apply(self, fn):
        for m in list(self.modules())[::-1]:
            fn(m)
        return self

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for k, c in self.named_children():
            sub = repr(c).replace("\n", "\n  ")
            lines.append(f"  ({k}): {sub}")
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"


class ModuleList(Module):
    """A list of submodules, registered as "0", "1", ..."""

    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module):
        self._modules[str(len(self._modules))] = module
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def __getitem__(self, i):
        if isinstance(i, slice):
            return ModuleList(list(self._modules.values())[i])
        n = len(self._modules)
        if not -n <= i < n:
            raise IndexError(f"ModuleList index {i} out of range for {n}")
        return self._modules[str(i % n)]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class ModuleDict(Module):
    """Named submodules, in insertion order."""

    def __init__(self, modules=None):
        super().__init__()
        for k, m in (modules or {}).items():
            self._modules[k] = m

    def __getitem__(self, k):
        return self._modules[k]

    def __setitem__(self, k, m):
        self._modules[k] = m

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()


class Sequential(ModuleList):
    """Submodules applied in order."""

    def __init__(self, *modules):
        super().__init__(modules)

    def forward(self, x):
        for m in self:
            x = m(x)
        return x


class Linear(Module):
    """y = x W^T + b over the last dim (F.linear); weight [out, in]. Initialized as PyTorch's:
    uniform(-1/sqrt(in), 1/sqrt(in)) for weight and bias."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
        w = (_ember.rand(out_features, in_features, dtype=dtype, device=device) * 2 - 1) * bound
        self.weight = Parameter(w)
        if bias:
            b = (_ember.rand(out_features, dtype=dtype, device=device) * 2 - 1) * bound
            self.bias = Parameter(b)
        else:
            self.register_parameter("bias", None)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias) if self.bias is not None \
            else F.linear(x, self.weight)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Embedding(Module):
    """Rows of weight [num_embeddings, embedding_dim] picked by int64 indices; weight normal(0, 1)."""

    def __init__(self, num_embeddings, embedding_dim, device=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(_ember.randn(num_embeddings, embedding_dim, dtype=dtype,
                                             device=device))

    def forward(self, idx):
        return F.embedding(idx, self.weight)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


class LayerNorm(Module):
    """Normalizes the trailing normalized_shape dims, then scales (weight 1) and shifts (bias 0)."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.weight = Parameter(_ember.ones(*self.normalized_shape, dtype=dtype, device=device)) \
            if elementwise_affine else None
        self.bias = Parameter(_ember.zeros(*self.normalized_shape, dtype=dtype, device=device)) \
            if elementwise_affine and bias else None

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}"


class Dropout(Module):
    """Training mode: zeroes elements with probability p, scales the rest by 1/(1-p)."""

    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)


class ReLU(Module):
    def forward(self, x):
        return x.relu()
