"""ember.optim: AdamW and SGD with PyTorch's signatures over the C++ optimizers
(include/ember/optim.h), which update the parameters in place, and nanoGPT's learning-rate
schedule. The learning rate is read from param_groups[i]["lr"] at each step (PyTorch's way of
scheduling), per group: while every group has the same rate it is the C++ optimizer's one
rate (set_lr); groups with different rates each get their own (a compiled AdamW then steps
eagerly)."""
import math as _math

from . import _ember
from ._ember import Tensor as _Tensor


def _param_groups(params, defaults):
    params = list(params)
    if not params:
        raise ValueError("optimizer got an empty parameter list")
    if isinstance(params[0], dict):
        groups = [dict(defaults, **g) for g in params]
    else:
        groups = [dict(defaults, params=params)]
    for g in groups:
        g["params"] = list(g["params"])
        for p in g["params"]:
            if not isinstance(p, _Tensor):
                raise TypeError(f"optimizer: expected ember tensors, got {type(p).__name__}")
    return groups


class Optimizer:
    """Base of the optimizers here: param_groups (dicts with "params", "lr", ...), step(),
    zero_grad(), state_dict()/load_state_dict()."""

    def __init__(self, groups, impl):
        self.param_groups = groups
        self._impl = impl
        self._group_lrs = [None] * len(groups)  # the rates the C++ groups hold (None: shared)

    def _sync_lr(self):
        """Hands param_groups' rates to the C++ optimizer: one shared rate while they agree
        (the common case, and the only one a compiled AdamW step fuses), else one per group."""
        lrs = [float(g["lr"]) for g in self.param_groups]
        if len(self._group_lrs) != len(lrs):
            raise ValueError("ember.optim: param groups cannot be added after construction")
        shared = all(lr == lrs[0] for lr in lrs)
        if shared and lrs[0] != self._impl.lr:
            self._impl.set_lr(lrs[0])
        for i, lr in enumerate(lrs):
            own = None if shared else lr
            if own != self._group_lrs[i]:
                self._impl.set_group_lr(i, own)
                self._group_lrs[i] = own

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        self._sync_lr()
        self._impl.step()
        return loss

    def zero_grad(self, set_to_none=True):
        self._impl.zero_grad()

    def state_dict(self):
        """The optimizer's state: {name: tensor} with the step count."""
        return dict(self._impl.state_dict())

    def load_state_dict(self, state):
        self._impl.load_state_dict(list(state.items()))


class AdamW(Optimizer):
    """Adam with decoupled weight decay. weight_decay applies per group (nanoGPT passes two
    groups: decay on 2-D+ tensors, none on biases and norms). compiled=True runs each step as
    one compiled function over every parameter (the C++ AdamW's set_compiled)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 compiled=False, fused=None):
        groups = _param_groups(params, dict(lr=lr, betas=betas, eps=eps,
                                            weight_decay=weight_decay))
        for g in groups:
            if tuple(g["betas"]) != tuple(betas) or g["eps"] != eps:
                raise ValueError("ember.optim.AdamW: betas and eps must be the same in every group")
        impl = _ember._AdamW([(g["params"], float(g["weight_decay"])) for g in groups],
                             float(groups[0]["lr"]), float(betas[0]), float(betas[1]), float(eps))
        impl.set_compiled(bool(compiled))
        super().__init__(groups, impl)


class SGD(Optimizer):
    """SGD with optional momentum (no dampening or Nesterov) and weight decay per group."""

    def __init__(self, params, lr=1e-3, momentum=0.0, weight_decay=0.0):
        groups = _param_groups(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))
        impl = _ember._SGD([(g["params"], float(g["weight_decay"])) for g in groups],
                           float(groups[0]["lr"]), float(momentum))
        super().__init__(groups, impl)


def decay_groups(module, weight_decay):
    """nanoGPT's grouping of module's parameters: weight decay on tensors of 2+ dims (matmul
    weights, embeddings), none on biases and norm weights."""
    params = list(module.parameters())
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def cosine_lr(it, lr, min_lr, warmup_iters, decay_iters):
    """Linear warmup to lr over warmup_iters, then cosine decay to min_lr at decay_iters, then
    min_lr (nanoGPT's get_lr; the C++ core's cosine_lr)."""
    return _ember._cosine_lr(int(it), float(lr), float(min_lr), int(warmup_iters),
                             int(decay_iters))
