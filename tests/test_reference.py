"""The reference interpreter: primitive meanings, symbol binding, and the errors that name the problem."""

import numpy as np
import pytest

import luminal as lm
from luminal import ops
from luminal.hl import prim
from luminal.runtime.reference import ExecutionError, read_view
from luminal.view import ShapeTracker, idx


def _graph_with(build, *inputs):
    g = lm.Graph()
    ts = [g.input(f"x{k}", a.shape, dtype=lm.dtypes.dtype_of(a.dtype)) for k, a in enumerate(inputs)]
    build(g, *ts).output("y")
    return lm.run(g, {f"x{k}": a for k, a in enumerate(inputs)})["y"]


def test_the_primitive_set_is_closed_and_documented():
    assert len(ops.PRIMITIVES) == 15
    assert [c.name for c in ops.PRIMITIVES] == [
        "Log2", "Exp2", "Sin", "Sqrt", "Recip", "Add", "Mul", "Mod", "LessThan",
        "SumReduce", "MaxReduce", "Iota", "Gather", "Scatter", "Cast",
    ]  # fmt: skip
    for cls in ops.PRIMITIVES + ops.STRUCTURAL:
        assert cls.meaning, f"{cls.name} has no documented meaning"


def test_unary_primitives():
    x = np.array([0.25, 1.0, 2.0, 9.0], np.float32)
    for record, want in [
        (prim.log2, np.log2(x)),
        (prim.exp2, np.exp2(x)),
        (prim.sin, np.sin(x)),
        (prim.sqrt, np.sqrt(x)),
        (prim.recip, 1 / x),
    ]:
        np.testing.assert_allclose(_graph_with(lambda g, t, record=record: record(t), x), want, rtol=1e-6)


def test_mod_truncates_like_c_and_lessthan_gives_bool():
    a = np.array([7, -7, 7, -7], np.int32)
    b = np.array([3, 3, -3, -3], np.int32)
    np.testing.assert_array_equal(_graph_with(lambda g, x, y: prim.fmod(x, y), a, b), [1, -1, 1, -1])
    out = _graph_with(lambda g, x, y: prim.less_than(x, y), a, b)
    assert out.dtype == np.bool_ and out.tolist() == [False, True, False, True]
    f = np.array([5.5, -5.5], np.float32)
    np.testing.assert_allclose(_graph_with(lambda g, x: prim.fmod(x, prim.full_like(x, 2.0)), f), [1.5, -1.5])


def test_reductions_remove_their_axis():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert _graph_with(lambda g, t: prim.sum_reduce(t, 1), x).tolist() == x.sum(1).tolist()
    assert _graph_with(lambda g, t: prim.max_reduce(t, 2), x).tolist() == x.max(2).tolist()


def test_iota_gather_scatter_cast():
    g = lm.Graph()
    n = lm.sym("n")
    data = g.input("data", (n, 3))
    i = prim.iota(g, idx(0, n) * 3 + 2, (n,))  # the last column's flat positions
    prim.gather(data, i).output("col")
    dest = g.input("dest", (6,))
    prim.scatter(dest, prim.iota(g, 5 - idx(0, 3), (3,)), prim.cast(prim.iota(g, idx(0, 3), (3,)), lm.float32)).output(
        "scattered"
    )
    prim.cast(data, lm.int32).output("ints")
    d = np.array([[0.5, -1.7, 2.9], [3.1, 4.0, -5.9]], np.float32)
    out = lm.run(g, {"data": d, "dest": np.zeros(6, np.float32)})
    assert out["col"].tolist() == [2.9000000953674316, -5.900000095367432]
    assert out["scattered"].tolist() == [0, 0, 0, 2, 1, 0]
    assert out["ints"].tolist() == [[0, -1, 2], [3, 4, -5]]  # float -> int truncates toward zero


def test_gather_out_of_range_names_the_index():
    with pytest.raises(IndexError, match="Gather: index 7"):
        _graph_with(lambda g, d, i: prim.gather(d, i), np.zeros(3, np.float32), np.array([0, 7]))


def test_symbols_are_bound_from_inputs():
    g = lm.Graph()
    b = lm.sym("b", max=16)
    x = g.input("x", (b, 2))
    y = g.input("y", (b * 2,))
    (x.reshape(-1) + y).output("z")
    out = lm.run(g, {"x": np.ones((3, 2), np.float32), "y": np.arange(6, dtype=np.float32)})
    assert out["z"].tolist() == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize(
    "feed, message",
    [
        ({}, "missing input"),
        ({"x": np.ones((3, 2), np.float32), "y": np.ones(6, np.float32), "extra": np.ones(1)}, "unknown input"),
        ({"x": np.ones((3, 2), np.float64), "y": np.ones(6, np.float32)}, "must be float32, got float64"),
        ({"x": np.ones((3, 3), np.float32), "y": np.ones(6, np.float32)}, r"input 'x' must have shape \(b, 2\)"),
        ({"x": np.ones((3, 2), np.float32), "y": np.ones(8, np.float32)}, r"input 'y' must have shape \(2\*b,\)"),
        ({"x": np.ones((3,), np.float32), "y": np.ones(6, np.float32)}, "must have shape"),
        ({"x": np.ones((40, 2), np.float32), "y": np.ones(80, np.float32)}, r"outside \[1, 16\]"),
        ({"x": [[1.0, 2.0]], "y": np.ones(2, np.float32)}, "must be a numpy array|must be float32"),
    ],
)
def test_bad_inputs_name_the_problem(feed, message):
    g = lm.Graph()
    b = lm.sym("b", max=16)
    x = g.input("x", (b, 2))
    y = g.input("y", (b * 2,))
    (x.reshape(-1) + y).output("z")
    with pytest.raises(ExecutionError, match=message):
        lm.run(g, feed)


def test_unbound_weight_and_missing_output_are_named():
    g = lm.Graph()
    x = g.input("x", (2,))
    w = g.weight("w", (2,))
    with pytest.raises(lm.GraphError, match="no outputs"):
        lm.run(g, {"x": np.ones(2, np.float32)})
    (x * w).output("y")
    with pytest.raises(ExecutionError, match=r"weight\(s\) \['w'\] are not bound"):
        lm.run(g, {"x": np.ones(2, np.float32)})
    with pytest.raises(lm.ShapeError, match="weight 'w' has shape"):
        g.bind({"w": np.ones(3, np.float32)})
    with pytest.raises(lm.DTypeError, match="weight 'w' is float32"):
        g.bind({"w": np.ones(2, np.int32)})
    with pytest.raises(lm.GraphError, match="no weight 'v'"):
        g.bind({"v": np.ones(2, np.float32)}, strict=True)


def test_recording_checks_shapes_and_dtypes():
    g = lm.Graph()
    a, b = g.input("a", (2, 3)), g.input("b", (3, 2))
    with pytest.raises(lm.ShapeError, match=r"Add: operands must have the same shape .*\(2, 3\), \(3, 2\)"):
        prim.add(a, b)
    with pytest.raises(lm.ShapeError, match="cannot be broadcast together"):
        a + b
    i = g.input("i", (2, 3), dtype=lm.int32)
    with pytest.raises(lm.ShapeError, match="Mul: operands must have one dtype"):
        prim.mul(a, i)
    with pytest.raises(lm.GraphError, match="already defined"):
        g.input("a", (1,))
    with pytest.raises(lm.SymbolicError, match="declared with range"):
        g.input("c", (lm.sym("s", max=4),)) + g.input("d", (lm.sym("s", max=8),))


def test_compile_runs_like_the_interpreter():
    g = lm.Graph()
    x = g.input("x", (lm.sym("batch"), 4))
    w = g.weight("w", (4, 3))
    ((x.unsqueeze(-1) * w).sum(1).exp()).output("y")
    g.bind({"w": np.full((4, 3), 0.1, np.float32)})
    xs = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    prog = lm.compile(g, target="cpu")
    np.testing.assert_allclose(prog.run({"x": xs})["y"], lm.run(g, {"x": xs})["y"], rtol=1e-6)


def test_a_gathered_view_broadcast_along_a_dimension_reads_like_numpy():
    """The general gather (a permute then a merge of dims: index with // and %) expanded along a new axis and
    padded: the interpreter gathers once per broadcast row and expands, so every row must still be right."""
    base = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    view = ShapeTracker.contiguous((2, 3, 4)).permute((1, 0, 2)).reshape((3, 8)).pad([(0, 0), (1, 2)])
    view = view.reshape((3, 1, 11)).expand((3, 5, 11))
    assert view.strides() is None  # the general path, not the strided one
    got = read_view(base, view, {})
    merged = np.pad(base.transpose(1, 0, 2).reshape(3, 8), [(0, 0), (1, 2)])
    np.testing.assert_array_equal(got, np.broadcast_to(merged[:, None, :], (3, 5, 11)))
