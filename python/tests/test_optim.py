"""ember.optim (AdamW, SGD, the cosine schedule), gradient clipping and safetensors files,
against numpy references."""
import math

import numpy as np
import pytest

import ember
import ember.nn as nn


def np_adamw(p, g, m, v, t, lr, b1, b2, eps, wd):
    p = p * (1 - lr * wd)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
    return p - lr * mhat / (np.sqrt(vhat) + eps), m, v


@pytest.mark.parametrize("compiled", [False, True])
def test_adamw_matches_numpy_with_decay_groups(compiled):
    lin = nn.Linear(4, 3)
    x = ember.randn(5, 4)
    groups = ember.optim.decay_groups(lin, 0.1)
    assert [len(g["params"]) for g in groups] == [1, 1]  # weight decayed, bias not
    opt = ember.optim.AdamW(groups, lr=0.01, betas=(0.9, 0.95), eps=1e-8, compiled=compiled)
    ref = {"w": lin.weight.detach().numpy().copy(), "b": lin.bias.detach().numpy().copy()}
    mom = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in ref.items()}
    for t in range(1, 4):
        lr = 0.01 / t
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad()
        (lin(x) ** 2).sum().backward()
        grads = {"w": lin.weight.grad.numpy().copy(), "b": lin.bias.grad.numpy().copy()}
        opt.step()
        for k, wd in (("w", 0.1), ("b", 0.0)):
            ref[k], m, v = np_adamw(ref[k], grads[k], *mom[k], t, lr, 0.9, 0.95, 1e-8, wd)
            mom[k] = (m, v)
        np.testing.assert_allclose(lin.weight.detach().numpy(), ref["w"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(lin.bias.detach().numpy(), ref["b"], rtol=1e-5, atol=1e-6)
    assert len(opt.state_dict()) > 0


def test_sgd_momentum_matches_numpy():
    w = nn.Parameter(ember.tensor([1.0, -2.0, 3.0]))
    opt = ember.optim.SGD([w], lr=0.1, momentum=0.9)
    ref, buf = np.array([1.0, -2.0, 3.0]), np.zeros(3)
    for _ in range(3):
        opt.zero_grad()
        (w * w).sum().backward()
        g = 2 * ref
        opt.step()
        buf = 0.9 * buf + g
        ref = ref - 0.1 * buf
        np.testing.assert_allclose(w.detach().numpy(), ref, rtol=1e-6)


def test_sgd_learning_rate_per_group():
    a, b = nn.Parameter(ember.tensor([1.0, 2.0])), nn.Parameter(ember.tensor([3.0]))
    opt = ember.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
    ref_a, ref_b = np.array([1.0, 2.0]), np.array([3.0])
    for lrs in ((0.1, 0.5), (0.2, 0.2), (0.05, 0.3)):  # per group, shared, per group again
        for g, lr in zip(opt.param_groups, lrs):
            g["lr"] = lr
        opt.zero_grad()
        ((a * a).sum() + (b * b).sum()).backward()
        opt.step()
        ref_a, ref_b = ref_a - lrs[0] * 2 * ref_a, ref_b - lrs[1] * 2 * ref_b
        np.testing.assert_allclose(a.detach().numpy(), ref_a, rtol=1e-6)
        np.testing.assert_allclose(b.detach().numpy(), ref_b, rtol=1e-6)


@pytest.mark.parametrize("compiled", [False, True])
def test_adamw_learning_rate_per_group(compiled):
    lin = nn.Linear(4, 3)
    x = ember.randn(5, 4)
    groups = ember.optim.decay_groups(lin, 0.1)
    groups[1]["lr"] = 0.05  # the bias steps faster than the default rate
    opt = ember.optim.AdamW(groups, lr=0.01, betas=(0.9, 0.95), compiled=compiled)
    assert [g["lr"] for g in opt.param_groups] == [0.01, 0.05]
    ref = {"w": lin.weight.detach().numpy().copy(), "b": lin.bias.detach().numpy().copy()}
    mom = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in ref.items()}
    # Different rates, then one shared rate (one compiled step), then different again.
    for t, lrs in enumerate(((0.01, 0.05), (0.02, 0.02), (0.003, 0.03)), start=1):
        for g, lr in zip(opt.param_groups, lrs):
            g["lr"] = lr
        opt.zero_grad()
        (lin(x) ** 2).sum().backward()
        grads = {"w": lin.weight.grad.numpy().copy(), "b": lin.bias.grad.numpy().copy()}
        opt.step()
        for k, wd, lr in (("w", 0.1, lrs[0]), ("b", 0.0, lrs[1])):
            ref[k], m, v = np_adamw(ref[k], grads[k], *mom[k], t, lr, 0.9, 0.95, 1e-8, wd)
            mom[k] = (m, v)
        np.testing.assert_allclose(lin.weight.detach().numpy(), ref["w"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(lin.bias.detach().numpy(), ref["b"], rtol=1e-5, atol=1e-6)


def test_cosine_lr_schedule():
    f = lambda it: ember.optim.cosine_lr(it, 1e-3, 1e-4, 100, 2000)  # noqa: E731
    assert f(0) == pytest.approx(1e-3 * 1 / 101)
    assert f(99) == pytest.approx(1e-3 * 100 / 101) and f(100) == pytest.approx(1e-3)
    mid = 1e-4 + 0.5 * (1 + math.cos(math.pi * 0.5)) * (1e-3 - 1e-4)
    assert f(1050) == pytest.approx(mid)
    assert f(2000) == pytest.approx(1e-4) and f(5000) == pytest.approx(1e-4)


def test_clip_grad_norm():
    a, b = nn.Parameter(ember.zeros(2)), nn.Parameter(ember.zeros(1))
    (a * ember.tensor([3.0, 0.0]) + 0).sum().backward()
    (b * 4.0).sum().backward()
    norm = nn.utils.clip_grad_norm_([a, b], 1.0)
    assert norm.item() == pytest.approx(5.0)
    np.testing.assert_allclose(a.grad.numpy(), [0.6, 0.0], rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), [0.8], rtol=1e-5)


def test_safetensors_round_trip(tmp_path):
    net = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    path = tmp_path / "m.safetensors"
    ember.safetensors.save_file(net.state_dict(), path, metadata={"k": "v"})
    loaded = ember.safetensors.load_file(path)
    assert list(loaded) == list(net.state_dict())
    assert ember.safetensors.load_metadata(path) == {"k": "v"}
    other = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    other.load_state_dict(loaded)
    x = ember.randn(2, 3)
    np.testing.assert_allclose(other(x).detach().numpy(), net(x).detach().numpy())
