"""ember.nn: the Module tree (registration by attribute assignment, names, tying, modes,
state dicts, to()) and the layers and functional ops against numpy references."""
import math

import numpy as np
import pytest

import ember
import ember.nn as nn
import ember.nn.functional as F


def np_layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(8, 4, bias=False)
        self.scale = nn.Parameter(ember.ones(4))
        self.register_buffer("steps", ember.zeros(1, dtype=ember.int64))
        self.register_buffer("table", ember.ones(2), persistent=False)
        self.blocks = nn.ModuleList([nn.LayerNorm(4) for _ in range(2)])
        self.note = "plain attribute"

    def forward(self, x):
        x = self.fc2(self.act(self.fc1(x))) * self.scale
        for b in self.blocks:
            x = b(x)
        return x


def test_registration_names_and_state_dict():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "fc1.weight", "fc1.bias", "fc2.weight", "blocks.0.weight",
                     "blocks.0.bias", "blocks.1.weight", "blocks.1.bias"]
    assert len(list(net.parameters())) == 8
    assert [n for n, _ in net.named_buffers()] == ["steps", "table"]
    sd = net.state_dict()
    assert "steps" in sd and "table" not in sd and "fc2.bias" not in sd
    assert set(sd) == set(names) | {"steps"}
    assert net.note == "plain attribute"
    assert isinstance(net.fc1.weight, nn.Parameter) and not isinstance(ember.ones(2), nn.Parameter)
    assert [n for n, _ in net.named_modules()][:4] == ["", "fc1", "act", "fc2"]
    with pytest.raises(AttributeError):
        net.missing


def test_subclass_must_call_init():
    class Bad(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(2, 2)
    with pytest.raises(AttributeError, match="super"):
        Bad()


def test_tied_parameter_appears_once():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(5, 3)
            self.head = nn.Linear(3, 5, bias=False)
            self.emb.weight = self.head.weight
    m = Tied()
    assert [n for n, _ in m.named_parameters()] == ["emb.weight"]
    assert set(m.state_dict()) == {"emb.weight", "head.weight"}
    m2 = m.to(ember.float64)
    assert m2.emb.weight is m2.head.weight and m2.emb.weight.dtype == ember.float64
    assert m2.emb.weight.requires_grad


def test_train_eval_zero_grad_load_state_dict():
    net = Net()
    assert net.training and net.blocks[1].training
    net.eval()
    assert not net.training and not net.blocks[1].training and not net.fc1.training
    net.train()
    assert net.blocks[0].training
    x = ember.randn(3, 4)
    net(x).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())

    other = Net()
    other.load_state_dict(net.state_dict())
    np.testing.assert_allclose(other(x).detach().numpy(), net(x).detach().numpy(), rtol=1e-6)
    sd = net.state_dict()
    sd["extra"] = ember.zeros(1)
    with pytest.raises(RuntimeError, match="unexpected"):
        other.load_state_dict(sd)
    del sd["extra"]
    del sd["scale"]
    with pytest.raises(RuntimeError, match="missing"):
        other.load_state_dict(sd)
    missing, unexpected = other.load_state_dict(sd, strict=False)
    assert missing == ["scale"] and unexpected == []
    sd["scale"] = ember.ones(5)
    with pytest.raises(RuntimeError, match="scale"):
        other.load_state_dict(sd)


def test_linear_and_grads_match_numpy():
    lin = nn.Linear(5, 3)
    x = ember.randn(2, 5)
    y = lin(x)
    w, b, xn = lin.weight.detach().numpy(), lin.bias.detach().numpy(), x.numpy()
    np.testing.assert_allclose(y.detach().numpy(), xn @ w.T + b, rtol=1e-5, atol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(lin.weight.grad.numpy(), np.ones((3, 2)) @ xn, rtol=1e-5)
    np.testing.assert_allclose(lin.bias.grad.numpy(), [2.0, 2.0, 2.0])
    assert abs(lin.weight.detach().numpy()).max() <= 1 / math.sqrt(5)


def test_embedding_layer_norm_gelu_match_numpy():
    emb = nn.Embedding(10, 4)
    idx = ember.tensor([[1, 3], [9, 0]])
    np.testing.assert_allclose(emb(idx).detach().numpy(), emb.weight.detach().numpy()[idx.numpy()])
    ln = nn.LayerNorm(6)
    with ember.no_grad():
        ln.weight.copy_(ember.randn(6))
        ln.bias.copy_(ember.randn(6))
    x = ember.randn(3, 6)
    np.testing.assert_allclose(ln(x).detach().numpy(),
                               np_layer_norm(x.numpy(), ln.weight.detach().numpy(),
                                             ln.bias.detach().numpy()), rtol=1e-4, atol=1e-5)
    erf = np.vectorize(math.erf)
    xn = x.numpy()
    np.testing.assert_allclose(nn.GELU()(x).numpy(), 0.5 * xn * (1 + erf(xn / math.sqrt(2))),
                               rtol=1e-4, atol=1e-6)
    tanh_ref = 0.5 * xn * (1 + np.tanh(math.sqrt(2 / math.pi) * (xn + 0.044715 * xn ** 3)))
    np.testing.assert_allclose(F.gelu(x, approximate="tanh").numpy(), tanh_ref, rtol=1e-4,
                               atol=1e-6)


def test_dropout_modes():
    d = nn.Dropout(0.5)
    x = ember.ones(1000)
    y = d(x).numpy()
    assert set(np.unique(y)) <= {0.0, 2.0} and 350 < (y == 0).sum() < 650
    d.eval()
    np.testing.assert_array_equal(d(x).numpy(), x.numpy())


def test_softmax_cross_entropy_attention_match_numpy():
    logits = ember.randn(6, 5)
    targets = ember.tensor([0, 4, 2, 1, -1, 3])
    ln = logits.numpy()
    np.testing.assert_allclose(F.softmax(logits, -1).numpy(), np_softmax(ln), rtol=1e-5)
    lsm = np.log(np_softmax(ln))
    keep = [0, 1, 2, 3, 5]
    ref = -np.mean([lsm[i, targets.numpy()[i]] for i in keep])
    np.testing.assert_allclose(F.cross_entropy(logits, targets, ignore_index=-1).item(), ref,
                               rtol=1e-5)
    np.testing.assert_allclose(F.log_softmax(logits, 1).numpy(), lsm, rtol=1e-5, atol=1e-6)

    q, k, v = (ember.randn(2, 3, 5, 4) for _ in range(3))
    s = q.numpy() @ k.numpy().transpose(0, 1, 3, 2) / 2.0
    s = np.where(np.tril(np.ones((5, 5), bool)), s, -np.inf)
    ref = np_softmax(s) @ v.numpy()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-5)


def test_sequential_moduledict_and_repr():
    seq = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    assert seq(ember.randn(5, 3)).shape == (5, 2)
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    md = nn.ModuleDict({"a": nn.Linear(2, 2)})
    assert list(md.keys()) == ["a"] and "Linear(in_features=2" in repr(md)


def test_compiled_module_trains_like_eager():
    ember.manual_seed(1)
    net = Net()
    x = ember.randn(3, 4)
    ref = net(x).sum()
    ref.backward()
    g_ref = [p.grad.numpy().copy() for p in net.parameters()]
    net.zero_grad()
    f = ember.compile(lambda x: net(x).sum())
    for _ in range(2):
        out = f(x)
        out.backward()
        np.testing.assert_allclose(out.item(), ref.item(), rtol=1e-5)
        for p, g in zip(net.parameters(), g_ref):
            np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-4, atol=1e-6)
        net.zero_grad()
    assert f.stats()["replays"] >= 1


def test_compiled_module_guards_training_flag():
    class Drop(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(x) * 1.0

    m = Drop()
    cm = ember.compile(m)
    x = ember.ones(200)
    assert (cm(x).numpy() == 0).sum() > 0  # training: dropout on
    m.eval()
    np.testing.assert_array_equal(cm(x).numpy(), x.numpy())  # traced again in eval mode
    m.train()
    assert (cm(x).numpy() == 0).sum() > 0
    assert cm.stats()["traces"] == 2 and cm.parameters is not None
