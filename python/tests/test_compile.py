"""ember.compile on Python functions: results equal eager, replays skip the function, Python
scalar arguments are guarded by value, graph breaks and errors."""
import numpy as np
import pytest

import ember


def mlp(x, w1, w2):
    return ((x @ w1).relu() @ w2).softmax(-1)


@pytest.fixture(params=["eager", "compiler"])
def backend(request):
    return request.param


def test_compiled_matches_eager_and_replays(backend):
    x, w1, w2 = ember.randn(4, 8), ember.randn(8, 16), ember.randn(16, 3)
    calls = []

    def f(x, w1, w2):
        calls.append(1)
        return mlp(x, w1, w2)

    cf = ember.compile(f, backend=backend)
    ref = mlp(x, w1, w2).numpy()
    np.testing.assert_allclose(cf(x, w1, w2).numpy(), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cf(x, w1, w2).numpy(), ref, rtol=1e-5, atol=1e-6)
    x2 = ember.randn(4, 8)
    np.testing.assert_allclose(cf(x2, w1, w2).numpy(), mlp(x2, w1, w2).numpy(), rtol=1e-5,
                               atol=1e-6)
    s = cf.stats()
    assert s["calls"] == 3 and s["traces"] == 1 and s["replays"] == 2
    assert len(calls) == 1  # replays do not run the Python function
    assert s["ops_per_compile"] and s["ops_per_compile"][0] >= 4


def test_python_scalar_arguments_are_guarded():
    def scale(x, alpha, shift=0):
        return x * alpha + shift

    cf = ember.compile(scale, backend="eager")
    x = ember.ones(3)
    assert cf(x, 2.0).tolist() == [2.0] * 3
    assert cf(x, 2.0).tolist() == [2.0] * 3
    assert cf.stats()["traces"] == 1
    assert cf(x, 3.0).tolist() == [3.0] * 3  # a new value traces again
    assert cf(x, 3.0, shift=1).tolist() == [4.0] * 3
    s = cf.stats()
    assert s["traces"] == 3 and s["recompiles"] == 2
    assert cf.would_hit(x, 2.0) and not cf.would_hit(x, 5.0)
    assert not cf.would_hit(ember.ones(4), 2.0)  # shapes are guarded too


SCALE = 2.0


def test_changed_globals_and_captured_numbers_trace_again():
    global SCALE

    def f(x):
        return x * SCALE

    cf = ember.compile(f, backend="eager")
    x = ember.ones(3)
    try:
        assert cf(x).tolist() == [2.0] * 3
        assert cf(x).tolist() == [2.0] * 3
        assert cf.stats()["traces"] == 1
        SCALE = 3.0  # a stale replay would give 2.0
        assert not cf.would_hit(x)
        assert cf(x).tolist() == [3.0] * 3
        assert cf.stats()["traces"] == 2 and cf.would_hit(x)
    finally:
        SCALE = 2.0

    shift = 1.0

    def g(x):
        return x + shift

    cg = ember.compile(g, backend="eager")
    assert cg(x).tolist() == [2.0] * 3
    shift = 5.0  # rebinding the captured variable changes the closure cell
    assert cg(x).tolist() == [6.0] * 3
    assert cg.stats()["traces"] == 2


def test_structured_results_and_arguments():
    @ember.compile(backend="eager")
    def f(pair, n):
        a, b = pair
        return (a + b, [a * n, None])

    a, b = ember.ones(2), ember.full((2,), 2.0)
    for _ in range(2):
        s, (m, none) = f((a, b), 3)
        assert s.tolist() == [3.0, 3.0] and m.tolist() == [3.0, 3.0] and none is None
    assert f.stats()["replays"] == 1


def test_graph_break_and_errors():
    def f(x):
        y = x * 2
        if y.sum().item() > 0:  # reads a value: a graph break
            return y + 1
        return y - 1

    cf = ember.compile(f, backend="eager")
    x = ember.ones(3)
    assert cf(x).tolist() == [3.0] * 3
    assert cf(-x).tolist() == [-3.0] * 3
    assert cf.stats()["breaks"] >= 1
    with pytest.raises(RuntimeError, match="graph break"):
        ember.compile(f, fullgraph=True, backend="eager")(x)
    with pytest.raises(TypeError, match="must return tensors"):
        ember.compile(lambda x: 1.0, backend="eager")(x)
    with pytest.raises(TypeError, match="cannot be passed"):
        ember.compile(lambda x: x, backend="eager")({"a": x})
    with pytest.raises(ZeroDivisionError):
        ember.compile(lambda x: x * (1 / 0), backend="eager")(x)


def test_training_step_compiles():
    w = ember.randn(4, 1, requires_grad=True)
    x, y = ember.randn(16, 4), ember.randn(16, 1)

    @ember.compile(backend="eager")
    def loss_fn(x, y):
        return ((x @ w - y) ** 2).mean()

    eager = ((x @ w - y) ** 2).mean()
    eager.backward()
    g_ref = w.grad.numpy().copy()
    w.grad = None
    for _ in range(2):
        loss = loss_fn(x, y)
        assert abs(loss.item() - eager.item()) < 1e-6
        loss.backward()
        np.testing.assert_allclose(w.grad.numpy(), g_ref, rtol=1e-5)
        w.grad = None
