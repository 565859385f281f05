"""ember.Tensor against numpy: factories, metadata, arithmetic, reductions, views, indexing,
in-place ops, conversions to Python values."""
import numpy as np
import pytest

import ember


def test_factories_dtype_device_shape():
    x = ember.ones(2, 3)
    assert x.shape == (2, 3) and x.size() == (2, 3) and x.size(1) == 3 and x.ndim == 2
    assert x.dtype == ember.float32 and str(x.device) == "cpu"
    assert ember.zeros((4,), dtype=ember.int64).dtype == ember.int64
    assert ember.full((2, 2), 7).dtype == ember.int64
    assert ember.full((2, 2), 1.5).tolist() == [[1.5, 1.5], [1.5, 1.5]]
    assert ember.arange(5).tolist() == [0, 1, 2, 3, 4]
    assert ember.arange(5).dtype == ember.int64
    np.testing.assert_allclose(ember.arange(0, 1, 0.25).numpy(), [0, 0.25, 0.5, 0.75])
    assert ember.zeros_like(x, dtype=ember.float64).dtype == ember.float64
    assert repr(ember.float32) == "ember.float32"
    assert ember.float32.itemsize == 4 and ember.float16.is_floating_point
    assert not ember.int64.is_floating_point


def test_tensor_from_data():
    t = ember.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert t.dtype == ember.float32 and t.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert ember.tensor([1, 2, 3]).dtype == ember.int64
    assert ember.tensor([True, False]).dtype == ember.bool
    assert ember.tensor(np.arange(3.0)).dtype == ember.float64
    assert ember.tensor(2.5).shape == () and ember.tensor(2.5).item() == 2.5
    a = np.arange(4.0)
    t = ember.tensor(a)
    a[0] = 100  # tensor() copies
    assert t[0].item() == 0.0
    with pytest.raises(TypeError, match="cannot make a tensor"):
        ember.tensor(["a", "b"])


def test_random_is_seeded():
    ember.manual_seed(42)
    a = ember.randn(3, 4)
    ember.manual_seed(42)
    b = ember.randn(3, 4)
    assert a.tolist() == b.tolist()
    u = ember.rand(1000).numpy()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.05
    r = ember.randint(3, 7, (500,)).numpy()
    assert r.min() == 3 and r.max() == 6 and r.dtype == np.int64
    assert ember.randint(5, (2, 2)).shape == (2, 2)


def test_arithmetic_matches_numpy():
    a_np = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    b_np = np.random.default_rng(1).standard_normal((4,)).astype(np.float32)
    a, b = ember.tensor(a_np), ember.tensor(b_np)
    np.testing.assert_allclose((a + b).numpy(), a_np + b_np, rtol=1e-6)
    np.testing.assert_allclose((a - 2).numpy(), a_np - 2, rtol=1e-6)
    np.testing.assert_allclose((2 - a).numpy(), 2 - a_np, rtol=1e-6)
    np.testing.assert_allclose((a * b * 0.5).numpy(), a_np * b_np * 0.5, rtol=1e-6)
    np.testing.assert_allclose((1 / (a.abs() + 1)).numpy(), 1 / (np.abs(a_np) + 1), rtol=1e-6)
    np.testing.assert_allclose((a ** 2).numpy(), a_np ** 2, rtol=1e-6)
    np.testing.assert_allclose((-a).exp().numpy(), np.exp(-a_np), rtol=1e-5)
    np.testing.assert_allclose((a @ a.T).numpy(), a_np @ a_np.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ember.tanh(a).numpy(), np.tanh(a_np), rtol=1e-5, atol=1e-6)
    assert (a > 0).dtype == ember.bool
    np.testing.assert_array_equal((a > b).numpy(), a_np > b_np)
    np.testing.assert_array_equal((a == a).numpy(), np.ones((3, 4), bool))


def test_scalar_type_promotion():
    i = ember.arange(4)
    assert (i + 1).dtype == ember.int64
    assert (i * 2.5).dtype == ember.float32
    assert (i / 2).tolist() == [0.0, 0.5, 1.0, 1.5]
    h = ember.ones(2, dtype=ember.float16)
    assert (h + 1.0).dtype == ember.float16
    assert (ember.ones(2, dtype=ember.int32) + 1).dtype == ember.int32
    assert (ember.ones(2, dtype=ember.int32) + 2 ** 40).dtype == ember.int32
    b = ember.tensor([True, False])
    assert (b + 1).dtype == ember.int64 and (b + 1).tolist() == [2, 1]
    assert (b * 0.5).dtype == ember.float32 and (b & True).dtype == ember.bool
    with pytest.raises(TypeError):
        ember.ones(2) + "a"
    assert (ember.ones(2) == None) is False  # noqa: E711 (falls back to identity)


def test_reductions_match_numpy():
    x_np = np.random.default_rng(2).standard_normal((2, 3, 4))
    x = ember.tensor(x_np)
    np.testing.assert_allclose(x.sum().item(), x_np.sum(), rtol=1e-12)
    np.testing.assert_allclose(x.sum(1).numpy(), x_np.sum(1), rtol=1e-12)
    np.testing.assert_allclose(x.mean((0, 2), keepdim=True).numpy(),
                               x_np.mean((0, 2), keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(x.var(-1).numpy(), x_np.var(-1, ddof=1), rtol=1e-10)
    values, indices = x.max(dim=2)
    np.testing.assert_allclose(values.numpy(), x_np.max(2))
    np.testing.assert_array_equal(indices.numpy(), x_np.argmax(2))
    assert x.max(1).indices.dtype == ember.int64
    assert x.max().item() == x_np.max()
    sm = x.softmax(-1).numpy()
    ref = np.exp(x_np) / np.exp(x_np).sum(-1, keepdims=True)
    np.testing.assert_allclose(sm, ref, rtol=1e-12)
    top = x.topk(2)
    np.testing.assert_allclose(top.values.numpy(), -np.sort(-x_np, -1)[..., :2])


def test_views_share_storage():
    x = ember.arange(12, dtype=ember.float32)
    v = x.view(3, 4)
    v[1, 2] = 100.0
    assert x[6].item() == 100.0
    p = v.permute(1, 0)
    assert p.shape == (4, 3) and not p.is_contiguous() and p.contiguous().is_contiguous()
    assert v.transpose(0, 1).tolist() == v.numpy().T.tolist()
    assert v.unsqueeze(0).shape == (1, 3, 4) and v.unsqueeze(0).squeeze(0).shape == (3, 4)
    assert x.reshape((2, -1)).shape == (2, 6)
    assert [c.shape for c in v.split(2, dim=1)] == [(3, 2), (3, 2)]
    with pytest.raises(RuntimeError, match="view"):
        x.view(5, 5)


def test_indexing_matches_numpy():
    x_np = np.arange(60).reshape(3, 4, 5)
    x = ember.tensor(x_np)
    for key in [1, -1, (0, 2), (slice(None), 1), (slice(1, None), slice(None, None, 2)),
                (Ellipsis, 3), (None, 1), (1, None, slice(0, 2)), (slice(None), Ellipsis, None),
                (slice(-2, None), -1, slice(1, 4))]:
        np.testing.assert_array_equal(x[key].numpy(), x_np[key], err_msg=str(key))
    mask = x_np % 7 == 0
    np.testing.assert_array_equal(x[ember.tensor(mask)].numpy(), x_np[mask])
    np.testing.assert_array_equal(x[ember.tensor([2, 0])].numpy(), x_np[[2, 0]])
    np.testing.assert_array_equal(x[[1, 1]].numpy(), x_np[[1, 1]])
    with pytest.raises(IndexError, match="out of bounds"):
        x[3]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0, 0]
    assert [row.shape for row in x] == [(4, 5)] * 3 and len(x) == 3


def test_setitem_and_inplace():
    x = ember.zeros(3, 4)
    x[0] = 1.0
    x[1:, ::2] = ember.full((2, 2), 2.0)
    ref = np.zeros((3, 4), np.float32)
    ref[0] = 1
    ref[1:, ::2] = 2
    np.testing.assert_array_equal(x.numpy(), ref)
    x[x > 1.5] = -1.0
    ref[ref > 1.5] = -1
    np.testing.assert_array_equal(x.numpy(), ref)
    y = ember.ones(2)
    assert y.add_(1) is y and y.tolist() == [2.0, 2.0]
    y.mul_(ember.tensor([1.0, 3.0]))
    y -= 1
    assert y.tolist() == [1.0, 5.0]
    y.zero_()
    assert y.tolist() == [0.0, 0.0]
    y.copy_(ember.tensor([4.0, 5.0]))
    assert y.tolist() == [4.0, 5.0]
    assert y.clamp_(max=4.5) is y and y.tolist() == [4.0, 4.5]


def test_item_tolist_repr_and_conversions():
    assert ember.tensor(3).item() == 3 and isinstance(ember.tensor(3).item(), int)
    assert isinstance(ember.tensor(True).item(), bool)
    with pytest.raises(ValueError, match="6 elements"):
        ember.ones(2, 3).item()
    assert float(ember.tensor(2.5)) == 2.5 and int(ember.tensor(7)) == 7
    assert bool(ember.tensor(1)) and not bool(ember.tensor(0.0))
    assert repr(ember.tensor([1.0, 2.0])).startswith("tensor([1")
    x = ember.tensor([1.5, -2.5])
    assert x.to(ember.int64).tolist() == [1, -2] and x.long().dtype == ember.int64
    assert x.to("cpu") .dtype == ember.float32 and x.cpu().device == ember.device("cpu")
    assert x.to(ember.zeros(1, dtype=ember.float64)).dtype == ember.float64
    assert x.double().to(dtype=ember.float16).dtype == ember.float16
    with pytest.raises(RuntimeError):
        ember.device("tpu")


def test_functions_over_several_tensors():
    a, b = ember.ones(2, 3), ember.zeros(2, 3)
    assert ember.cat([a, b]).shape == (4, 3) and ember.cat([a, b], dim=1).shape == (2, 6)
    assert ember.stack([a, b]).shape == (2, 2, 3)
    w = ember.where(a > 0.5, a, 5.0)
    assert w.tolist() == a.tolist()
    assert ember.where(b > 0.5, a, 5.0).tolist() == [[5.0] * 3] * 2
    assert ember.exp(ember.zeros(2)).tolist() == [1.0, 1.0]
    assert ember.sum(a, 1).tolist() == [3.0, 3.0]
