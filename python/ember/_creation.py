"""Tensors from Python data: tensor() copies (as torch.tensor), from_numpy() and as_tensor()
share memory when they can."""
import numpy as _np

from ._ember import Tensor, from_dlpack, get_default_dtype


def _infer_numpy(data):
    """data as a numpy array; Python floats become the default float dtype, as in PyTorch."""
    if isinstance(data, _np.ndarray) or isinstance(data, _np.generic):
        return _np.asarray(data), None
    arr = _np.asarray(data)
    if arr.dtype.kind == "f":
        return arr, get_default_dtype()
    if arr.dtype.kind in "iu":
        return arr.astype(_np.int64), None
    if arr.dtype.kind == "b":
        return arr, None
    raise TypeError(f"tensor(): cannot make a tensor from {type(data).__name__} "
                    f"(numpy made an array of dtype {arr.dtype}); give numbers, bools, "
                    "nested lists of them, or a numpy array")


def tensor(data, *, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of data (numbers, nested lists, a numpy array, a tensor)."""
    if isinstance(data, Tensor):
        t = data.detach().clone()
    else:
        arr, inferred = _infer_numpy(data)
        if arr.dtype.kind == "u":
            arr = arr.astype(_np.int64)
        t = from_dlpack(_np.array(arr, order="C")).clone()  # keeps 0-dim shapes
        if dtype is None:
            dtype = inferred
    if dtype is not None:
        t = t.to(dtype)
    if device is not None:
        t = t.to(device)
    if requires_grad:
        t.requires_grad_(True)
    return t


def from_numpy(array):
    """A tensor sharing the numpy array's memory (writes show on both sides)."""
    if not isinstance(array, _np.ndarray):
        raise TypeError(f"from_numpy(): expected a numpy.ndarray, got {type(array).__name__}")
    return from_dlpack(array)


def as_tensor(data, dtype=None, device=None):
    """data as a tensor, sharing memory when it already is one or a numpy array of that dtype."""
    if isinstance(data, Tensor):
        t = data
    elif isinstance(data, _np.ndarray):
        t = from_dlpack(data)
    else:
        return tensor(data, dtype=dtype, device=device)
    if device is not None:
        t = t.to(device)
    if dtype is not None:
        t = t.to(dtype)
    return t
