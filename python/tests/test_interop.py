"""Zero-copy exchange with numpy (and torch when it is installed) through DLPack."""
import numpy as np
import pytest

import ember


def test_numpy_to_ember_to_numpy_shares_memory():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = ember.from_dlpack(a)
    assert t.shape == (3, 4) and t.dtype == ember.float32
    assert t.data_ptr() == a.ctypes.data
    back = t.numpy()
    assert back.ctypes.data == a.ctypes.data
    a[1, 1] = -7
    assert t[1, 1].item() == -7
    t[0, 0] = 42.0
    assert a[0, 0] == 42 and back[0, 0] == 42


def test_ember_to_numpy_via_dlpack_and_array():
    t = ember.arange(6, dtype=ember.float64).view(2, 3)
    n = np.from_dlpack(t)
    assert n.ctypes.data == t.data_ptr() and n.shape == (2, 3)
    assert np.asarray(t).ctypes.data == t.data_ptr()
    assert t.__dlpack_device__() == (1, 0)
    # Strided views keep their strides.
    v = t.T
    np.testing.assert_array_equal(np.from_dlpack(v), np.arange(6.0).reshape(2, 3).T)


def test_dtypes_and_strides_round_trip():
    for dt in [np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_]:
        a = (np.arange(10) % 3).astype(dt)
        t = ember.from_numpy(a)
        np.testing.assert_array_equal(t.numpy(), a)
    a = np.arange(20.0).reshape(4, 5)[::2, 1:]
    t = ember.from_dlpack(a)
    assert t.stride() == (10, 1) and t.tolist() == a.tolist()
    with pytest.raises(ValueError, match="negative strides"):
        ember.from_dlpack(np.arange(4.0)[::-1])
    with pytest.raises(TypeError, match="no ember dtype"):
        ember.from_dlpack(np.arange(4, dtype=np.uint16))


def test_memory_outlives_the_exporter():
    t = ember.from_dlpack(np.arange(5.0))  # the array has no other reference
    assert t.sum().item() == 10.0
    n = ember.arange(4, dtype=ember.float32).numpy()  # the tensor has no other reference
    assert n.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_torch_round_trip():
    torch = pytest.importorskip("torch")
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = ember.from_dlpack(x)
    assert t.data_ptr() == x.data_ptr()
    y = torch.from_dlpack(t)
    assert y.data_ptr() == x.data_ptr()
    t.add_(1)
    assert x[0, 0].item() == 1.0


def test_one_gigabyte_round_trip_shares_memory():
    n = 2 ** 28  # float32: 1 GiB
    t = ember.empty(n)
    ptr = t.data_ptr()
    a = np.from_dlpack(t)
    assert a.__array_interface__["data"][0] == ptr and a.nbytes == 2 ** 30
    assert np.asarray(t).__array_interface__["data"][0] == ptr
    back = ember.from_dlpack(a)
    assert back.data_ptr() == ptr and back.shape == (n,) and back.dtype == ember.float32
    a[n - 1] = 7.0  # one memory: a write through numpy is seen by both tensors
    assert t[n - 1].item() == 7.0 and back[n - 1].item() == 7.0
