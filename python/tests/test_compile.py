"""ember.compile on Python functions: results equal eager, replays skip the function, Python
scalar arguments are guarded by value, graph breaks (reported at the Python line that broke) and
errors, ember.explain."""
import os
import subprocess
import sys

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


def test_python_numbers_build_the_graph_cpp_does():
    # A number meets a float32 tensor as a float32 constant: no cast of it in the graph.
    report = ember.explain(lambda x: x * 2 + 1)(ember.ones(3))
    assert report.ops_per_graph == [4]  # full, mul, full, add
    assert "cast" not in report.graphs[0]


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


HUGE = 10 ** 30  # beyond int64: guarded by its digits


class Scaler:
    def scale(self, x):
        return x * (2.0 if HUGE > 10 ** 29 else 3.0)


def test_a_bound_methods_globals_are_guarded_huge_ints_too():
    global HUGE
    cf = ember.compile(Scaler().scale, backend="eager")
    x = ember.ones(2)
    try:
        assert cf(x).tolist() == [2.0, 2.0] and cf.would_hit(x)
        HUGE = 10 ** 29
        assert not cf.would_hit(x)
        assert cf(x).tolist() == [3.0, 3.0]
        assert cf.stats()["traces"] == 2
        report = cf.explain()  # the first trace's guards; the miss that traced again
        assert f'global HUGE == "int {10 ** 30}"' in report.guards
        assert report.recompile_reasons == [
            f'global HUGE: expected "int {10 ** 30}", got "int {10 ** 29}"']
    finally:
        HUGE = 10 ** 30


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


def line_of(marker):
    """The line of this file that holds `marker` (a comment on the statement under test)."""
    with open(__file__) as f:
        lines = [i for i, text in enumerate(f, 1) if text.rstrip().endswith(marker)]
    assert len(lines) == 1, marker
    return f"{__file__}:{lines[0]}"


def breaks_at_item(x):
    y = x * 2
    total = y.sum()
    if total.item() > 0:  # breaks here
        return y + 1
    return y - 1


def test_mode_reduce_overhead_runs_as_default_on_the_cpu_and_unknown_modes_are_refused():
    x, w1, w2 = ember.randn(4, 8), ember.randn(8, 16), ember.randn(16, 3)
    for mode in (None, "default", "reduce-overhead"):
        cf = ember.compile(mlp, mode=mode)
        for _ in range(3):
            np.testing.assert_allclose(cf(x, w1, w2).numpy(), mlp(x, w1, w2).numpy(),
                                       rtol=1e-5, atol=1e-6)
        assert cf.stats()["replays"] == 2
    with pytest.raises(ValueError, match="unknown mode 'max-autotune'"):
        ember.compile(mlp, mode="max-autotune")


def test_graph_break_is_reported_at_the_python_line(backend):
    cf = ember.compile(breaks_at_item, backend=backend)
    x = ember.ones(3)
    assert cf(x).tolist() == [3.0] * 3
    report = cf.explain()
    assert [b.location for b in report.breaks] == [line_of("# breaks here")]
    assert report.breaks[0].op == "item" and report.graph_break_count == 1
    assert line_of("# breaks here") in str(report)
    with pytest.raises(RuntimeError, match=line_of("# breaks here")):
        ember.compile(breaks_at_item, fullgraph=True, backend=backend)(x)


def test_graph_break_logs_name_the_python_line():
    # EMBER_LOGS is read once per process: a fresh interpreter reads this one.
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import ember, test_compile as t; "
            "ember.compile(t.breaks_at_item, backend='eager')(ember.ones(2))")
    env = dict(os.environ, EMBER_LOGS="graph_breaks")
    r = subprocess.run([sys.executable, "-c", code, os.path.dirname(__file__)], env=env,
                       capture_output=True, text=True, check=True)
    assert f"graph break at {line_of('# breaks here')}: item" in r.stderr, r.stderr


def helper_that_breaks(y):
    return ember.nonzero(y)  # data-dependent shape


def test_break_inside_a_called_function_is_reported_there():
    def f(x):
        return helper_that_breaks(x * 2).sum()

    report = ember.explain(f)(ember.tensor([0.0, 1.0, 2.0]))
    assert [b.location for b in report.breaks] == [line_of("# data-dependent shape")]


def test_explain_lists_graphs_breaks_and_guards():
    def f(x, n):
        y = x * SCALE
        if y.sum().item() > 0:  # explain's break
            return y + n
        return y - n

    x = ember.ones(3)
    report = ember.explain(f)(x, 1)
    assert report.graph_count == 2 and len(report.graphs) == 2
    assert report.op_count == sum(report.ops_per_graph) > 0
    assert [b.location for b in report.breaks] == [line_of("# explain's break")]
    assert "input 0: float32[3] contiguous cpu" in report.guards
    assert "global SCALE == 2.0" in report.guards
    assert "non-tensor argument 0 == 1" in report.guards
    text = str(report)
    assert "2 graphs, 1 graph break" in text and "global SCALE == 2.0" in text
    # The older form, explain(fn, *args), runs at once; a compiled function explains itself.
    assert ember.explain(f, x, 1).guards == report.guards
    cf = ember.compile(f, backend="eager")
    cf(x, 1)
    cf(x, 2)
    assert cf.explain().recompile_reasons == ["non-tensor argument 0: expected 1, got 2"]
