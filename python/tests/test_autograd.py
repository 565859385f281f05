"""backward() and .grad against finite differences; no_grad as context manager and decorator."""
import numpy as np
import pytest

import ember


def f(x, w):
    return ((x @ w).tanh() * 2 + x.sum(1, keepdim=True)).softmax(-1).log().mean()


def test_gradients_match_finite_differences():
    rng = np.random.default_rng(0)
    x_np, w_np = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    x = ember.tensor(x_np, requires_grad=True)
    w = ember.tensor(w_np, requires_grad=True)
    loss = f(x, w)
    assert loss.requires_grad and not loss.is_leaf and x.is_leaf
    loss.backward()
    eps = 1e-6
    for t, base in [(x, x_np), (w, w_np)]:
        numeric = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            plus, minus = base.copy(), base.copy()
            plus[idx] += eps
            minus[idx] -= eps
            args_p = [ember.tensor(plus), ember.tensor(w_np)] if t is x else [ember.tensor(x_np), ember.tensor(plus)]
            args_m = [ember.tensor(minus), ember.tensor(w_np)] if t is x else [ember.tensor(x_np), ember.tensor(minus)]
            numeric[idx] = (f(*args_p).item() - f(*args_m).item()) / (2 * eps)
        np.testing.assert_allclose(t.grad.numpy(), numeric, rtol=1e-5, atol=1e-8)


def test_grad_accumulates_and_can_be_reset():
    x = ember.ones(3, requires_grad=True)
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    assert x.grad.tolist() == [5.0, 5.0, 5.0]
    x.grad = None
    assert x.grad is None
    with pytest.raises(RuntimeError):
        ember.ones(2).sum().backward()  # nothing requires grad


def test_no_grad_context_and_decorator():
    x = ember.ones(2, requires_grad=True)
    with ember.no_grad():
        assert not ember.is_grad_enabled()
        assert not (x * 2).requires_grad
        with ember.enable_grad():
            assert (x * 2).requires_grad
    assert ember.is_grad_enabled()

    @ember.no_grad()
    def g(t):
        return t * 2

    assert not g(x).requires_grad and ember.is_grad_enabled()
    assert (x * 2).detach().requires_grad is False
    with pytest.raises(ValueError, match="requires grad"):
        x.numpy()
