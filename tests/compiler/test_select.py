"""`where` and its kin (a gather over stacked rows in the primitive graph) lowered as an element-wise select
(compiler/kernels/lower_select.py), and small max reductions unrolled (compiler/kernels/lower.py)."""

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.functional as F
from luminal.compiler.artifact import ArtifactError
from luminal.compiler.kernels import ir
from luminal.compiler.storage.artifact_json import program_from_json, program_to_json
from luminal.hl.comparison import _choose

RNG = np.random.default_rng(11)


def _nodes(prog, kind, op=None) -> list:
    return [
        n
        for k in prog.kernels.kernels
        for v in ([k.body] if isinstance(k, ir.LoopKernel) else [k.dest, k.at, k.src])
        for n in ir.walk(v)
        if isinstance(n, kind) and (op is None or n.op == op)
    ]


def test_where_is_a_select_and_keeps_the_sign_of_a_zero():
    g = lm.Graph()
    n = lm.sym("n", max=64)
    c, a, b = g.input("c", (n, 5), lm.bool_), g.input("a", (1, 5)), g.input("b", (n, 1))
    F.where(c, a, b).output("y")
    prog = lm.compile(g, "cpu", cache=False)
    assert not _nodes(prog, ir.GatherLoad) and len(_nodes(prog, ir.Apply, "Select")) == 1
    assert len(prog.kernels.kernels) == 1  # no [2, n, 5] stack stored
    feed = {
        "c": RNG.random((7, 5)) < 0.5,
        "a": np.array([[-0.0, np.inf, np.nan, 1.5, -2.0]], np.float32),
        "b": np.array([[-np.inf], [np.nan], [-0.0], [0.0], [3.0], [4.0], [-5.0]], np.float32),
    }
    got = prog.run(feed)["y"]
    want = torch.where(*(torch.from_numpy(feed[k]) for k in "cab")).numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # the gather's row sum gave +0.0


def test_nan_to_num_selects_among_four_rows():
    g = lm.Graph()
    x = g.input("x", (6,))
    F.nan_to_num(x, nan=1.0, posinf=2.0).output("y")
    prog = lm.compile(g, "cpu", cache=False)
    (select,) = _nodes(prog, ir.Apply, "Select")
    assert len(select.args) == 5 and not _nodes(prog, ir.GatherLoad)  # the choice is 0..3: bounded by the ops
    xs = np.array([np.nan, np.inf, -np.inf, 0.5, -0.0, 3e38], np.float32)
    want = torch.nan_to_num(torch.from_numpy(xs), nan=1.0, posinf=2.0).numpy()
    np.testing.assert_array_equal(prog.run({"x": xs})["y"], want)


def test_a_choice_that_may_be_out_of_range_stays_a_gather():
    g = lm.Graph()
    choice, a, b = g.input("choice", (4,), lm.int64), g.input("a", (4,)), g.input("b", (4,))
    _choose(choice, [a, b]).output("y")
    prog = lm.compile(g, "cpu", cache=False)
    assert _nodes(prog, ir.GatherLoad) and not _nodes(prog, ir.Apply, "Select")
    feed = {"choice": np.array([0, 1, 1, 0]), "a": np.arange(4, dtype=np.float32), "b": -np.arange(4, dtype=np.float32)}
    np.testing.assert_array_equal(prog.run(feed)["y"], [0, -1, -2, 3])
    with pytest.raises(IndexError, match="out of range"):  # as the reference: index 2 * 4 + 2 is past the stack
        prog.run({**feed, "choice": np.array([0, 1, 2, 0])})


@pytest.mark.parametrize("dtype", [lm.float32, lm.int32])
def test_clamp_unrolls_its_two_small_maxima(dtype):
    g = lm.Graph()
    x = g.input("x", (lm.sym("n", max=64), 3), dtype)
    F.clamp(x, -2, 5).output("y")
    prog = lm.compile(g, "cpu", cache=False)
    assert not _nodes(prog, ir.Reduce) and len(set(_nodes(prog, ir.Apply, "Max"))) == 2
    assert len(prog.kernels.kernels) == 1
    xs = (RNG.standard_normal((9, 3)) * 6).astype(dtype.np)
    if dtype.is_float:
        xs[0] = [np.nan, -np.inf, np.inf]
    want = torch.clamp(torch.from_numpy(xs), -2, 5).numpy()
    np.testing.assert_array_equal(prog.run({"x": xs})["y"], want)


def _selecting_program():
    g = lm.Graph()
    x = g.input("x", (3, 4))
    F.clamp(F.elu(x), max=1.5).output("y")
    return lm.compile(g, "cpu", cache=False)


def test_select_and_max_survive_the_artifact_round_trip():
    prog = _selecting_program()
    back = program_from_json(program_to_json(prog.kernels))
    assert back.kernels == prog.kernels.kernels


def test_an_artifact_select_with_too_few_arguments_is_refused():
    doc = program_to_json(_selecting_program().kernels)
    row = next(r for r in doc["values"] if r["kind"] == "apply" and r["op"] == "Select")
    row["args"] = row["args"][:2]
    with pytest.raises(ArtifactError, match="Select takes 3 or more arguments"):
        program_from_json(doc)


def test_where_on_bools_is_a_select():
    g = lm.Graph()
    c, a, b = (g.input(name, (6,), lm.bool_) for name in "cab")
    F.where(c, a, b).output("y")
    prog = lm.compile(g, "cpu", cache=False)
    assert not _nodes(prog, ir.GatherLoad) and _nodes(prog, ir.Apply, "Select")
    feed = {name: RNG.random(6) < 0.5 for name in "cab"}
    np.testing.assert_array_equal(prog.run(feed)["y"], np.where(feed["c"], feed["a"], feed["b"]))
