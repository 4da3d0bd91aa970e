"""The CPU runtime binds symbols from input shapes once per set of shapes (runtime/cpu.py `_bind`, `_place`):
calls that alternate or repeat shapes, or hand the same shapes new arrays, still compute what the interpreter does,
and a wrong shape is still refused by name after a good one was remembered."""

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.runtime import cpu
from luminal.runtime.reference import ExecutionError

RNG = np.random.default_rng(11)


def _program():
    g = lm.Graph()
    n, m = lm.sym("n", max=64), lm.sym("m", max=64)
    x, y = g.input("x", (n, 24)), g.input("y", (m, 24))
    w = g.weight("w", (24, 24))
    g.bind({"w": RNG.standard_normal((24, 24)).astype(np.float32)})
    (F.relu(x @ w) + 1).output("a")
    (y * 2).sum(0).output("b")
    return g, lm.compile(g, "cpu", cache=False)


def test_alternating_shapes_and_fresh_arrays_match_the_interpreter(monkeypatch):
    g, prog = _program()
    solved = []
    original = cpu.bind_symbols
    monkeypatch.setattr(cpu, "bind_symbols", lambda *a, **k: solved.append(1) or original(*a, **k))
    # Repeats too: a run with the last run's shapes keeps the table pointing at that binding's arena.
    for n, m in [(3, 5), (7, 1), (7, 1), (3, 5), (3, 5), (7, 1), (3, 5)]:
        x, y = RNG.standard_normal((n, 24)), RNG.standard_normal((m, 24))
        feed = {"x": x.astype(np.float32), "y": y.astype(np.float32)}
        got, want = prog.run(feed), lm.run(g, feed)
        for k in want:
            assert got[k].shape == want[k].shape
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=f"n={n} m={m}: {k}")
    assert len(solved) == 2  # once per set of shapes


def test_a_wrong_shape_is_still_refused_after_good_ones():
    _, prog = _program()
    good = {"x": np.zeros((3, 24), np.float32), "y": np.zeros((5, 24), np.float32)}
    prog.run(good)
    with pytest.raises(ExecutionError, match="input 'x'"):
        prog.run({**good, "x": np.zeros((3, 25), np.float32)})
    with pytest.raises(ExecutionError, match="float32"):
        prog.run({**good, "y": np.zeros((5, 24), np.float64)})
