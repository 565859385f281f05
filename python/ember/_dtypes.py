"""The dtypes as module attributes (ember.float32 ...), with PyTorch's aliases and repr."""

from ._ember import dtype, _dtype_repr, _dtype_itemsize, _dtype_is_floating_point

dtype.__repr__ = lambda self: _dtype_repr(self)
dtype.__str__ = lambda self: _dtype_repr(self)
dtype.itemsize = property(lambda self: _dtype_itemsize(self))
dtype.is_floating_point = property(lambda self: _dtype_is_floating_point(self))

bool = dtype.bool
int32 = dtype.int32
int64 = dtype.int64
float16 = dtype.float16
bfloat16 = dtype.bfloat16
float32 = dtype.float32
float64 = dtype.float64
half = float16
float = float32
double = float64
long = int64
int = int32

