"""Deterministic compiler passes keep every random graph's outputs (checked against the interpreter)."""

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.graph.passes import (
    PASSES,
    apply_identities,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_constants,
)
from luminal.hl import prim
from tests.graph_fuzz import random_graph


def _assert_same(a, b, seed):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=f"seed {seed}, {k}")


@pytest.mark.parametrize("seed", range(120))
def test_every_pass_preserves_outputs(seed):
    g, feed = random_graph(seed)
    want = lm.run(g, feed)
    for name, run_pass in PASSES:
        g = run_pass(g)
        _assert_same(lm.run(g, feed), want, f"{seed} after {name}")


def _small_graph():
    g = lm.Graph()
    x = g.input("x", (lm.sym("b"), 3))
    g.weight("unused", (2,))
    two = g.constant(2.0) * 1.5 + 0.5  # folds to one constant
    y = prim.recip(prim.recip(x.exp() * 1 + 0))  # identities
    (y * two + x.exp()).output("y")  # x.exp() twice: one after CSE
    g.bind({"unused": np.ones(2, np.float32)})
    return g


def test_passes_do_what_they_say():
    g = _small_graph()
    names = lambda h: [n.op.name for n in h.nodes]  # noqa: E731
    assert "Weight" not in names(eliminate_dead_code(g))
    folded = eliminate_dead_code(fold_constants(g))  # 2.0 * 1.5 + 0.5: two ops and three constants become one
    assert len(folded.nodes) == len(eliminate_dead_code(g).nodes) - 4
    assert names(eliminate_dead_code(apply_identities(g))).count("Recip") == 0
    assert names(eliminate_common_subexpressions(g)).count("Exp2") == 1
    final = g
    for _, run_pass in PASSES:
        final = run_pass(final)
    assert len(final.nodes) < len(g.nodes) / 2
    assert list(final.inputs) == ["x"] and list(final.outputs) == ["y"]
