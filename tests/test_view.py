"""Views: random chains of movement ops must read exactly what numpy does with the same ops."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import luminal as lm
from luminal.runtime.reference import read_view
from luminal.symbolic import as_expr
from luminal.view import ShapeError, ShapeTracker


def _factorizations(n: int) -> list[list[int]]:
    out = [[n]]
    for d in range(2, n):
        if n % d == 0:
            out += [[d, *rest] for rest in _factorizations(n // d)]
    return out


def _apply(draw, view: ShapeTracker, arr: np.ndarray, env: dict) -> tuple[ShapeTracker, np.ndarray, str]:
    """One random movement op on the view and, identically, on the numpy array."""
    shape = [as_expr(d) for d in view.shape]
    sizes = list(arr.shape)
    kind = draw(st.sampled_from(["permute", "reshape", "expand", "slice", "pad", "flip", "unsqueeze", "squeeze"]))
    if kind == "permute":
        order = draw(st.permutations(range(len(shape))))
        return view.permute(order), arr.transpose(order), f"permute{order}"
    if kind == "reshape":
        # Merge two adjacent dims, or split a constant dim into factors (valid for symbolic dims too).
        if len(shape) >= 2 and draw(st.booleans()):
            k = draw(st.integers(0, len(shape) - 2))
            new = shape[:k] + [shape[k] * shape[k + 1]] + shape[k + 2 :]
        else:
            consts = [k for k, d in enumerate(shape) if d.is_const and d.value > 1]
            if not consts:
                return view, arr, "noop"
            k = draw(st.sampled_from(consts))
            parts = draw(st.sampled_from(_factorizations(shape[k].value)))
            new = shape[:k] + [as_expr(p) for p in parts] + shape[k + 1 :]
        concrete = [int(d.evaluate(env)) for d in new]
        return view.reshape(new), arr.reshape(concrete), f"reshape{[str(d) for d in new]}"
    if kind == "expand":
        ones = [k for k, d in enumerate(shape) if d == 1]
        if not ones:
            return view, arr, "noop"
        k = draw(st.sampled_from(ones))
        size = draw(st.integers(1, 4))
        new = shape[:k] + [as_expr(size)] + shape[k + 1 :]
        return view.expand(new), np.broadcast_to(arr, [size if j == k else s for j, s in enumerate(sizes)]), "expand"
    if kind == "slice":
        bounds, np_index = [], []
        for d, n in zip(shape, sizes):
            start = draw(st.integers(0, min(n, 2)))
            step = draw(st.integers(1, 3))
            if d.is_const:
                stop = draw(st.integers(start, n))
                bounds.append((start, stop, step))
            else:
                bounds.append((start, d, step))  # keep the symbolic extent: slice [start, n)
                stop = n
            np_index.append(slice(start, stop, step))
        return view.slice(bounds), arr[tuple(np_index)], f"slice{bounds}"
    if kind == "pad" and shape:
        widths = [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape]
        return view.pad(widths), np.pad(arr, widths), f"pad{widths}"
    if kind in ("pad", "flip") and not shape:
        return view, arr, "noop"
    if kind == "flip":
        axes = draw(st.lists(st.integers(0, max(len(shape) - 1, 0)), max_size=2, unique=True)) if shape else []
        return view.flip(axes), np.flip(arr, axes) if axes else arr, f"flip{axes}"
    if kind == "unsqueeze":
        k = draw(st.integers(0, len(shape)))
        return view.reshape(shape[:k] + [as_expr(1)] + shape[k:]), np.expand_dims(arr, k), "unsqueeze"
    ones = [k for k, d in enumerate(shape) if d == 1]
    if not ones:
        return view, arr, "noop"
    k = draw(st.sampled_from(ones))
    return view.reshape(shape[:k] + shape[k + 1 :]), np.squeeze(arr, k), "squeeze"


@st.composite
def chains(draw, symbolic: bool):
    rank = draw(st.integers(1, 4))
    sizes = [draw(st.integers(1, 5)) for _ in range(rank)]
    env = {}
    dims = list(sizes)
    if symbolic:
        env["n"] = sizes[0]
        dims[0] = lm.sym("n", max=8)
    view = ShapeTracker.contiguous(dims)
    base = np.arange(int(np.prod(sizes)), dtype=np.int64)
    arr = base.reshape(sizes)
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        view, arr, what = _apply(draw, view, arr, env)
        steps.append(what)
    return view, arr, base, env, steps


def _check(chain):
    view, want, base, env, steps = chain
    got = read_view(base, view, env)
    assert got.shape == want.shape, steps
    np.testing.assert_array_equal(got, want, err_msg=" -> ".join(steps))


@settings(max_examples=300, deadline=None)
@given(chains(symbolic=False))
def test_movement_chains_match_numpy(chain):
    _check(chain)


@settings(max_examples=200, deadline=None)
@given(chains(symbolic=True))
def test_movement_chains_with_a_symbolic_dim_match_numpy(chain):
    _check(chain)


@settings(max_examples=100, deadline=None)
@given(chains(symbolic=True))
def test_views_replay_from_their_history(chain):
    view = chain[0]
    assert ShapeTracker.from_json(view.to_json()) == view


def test_reshape_of_a_transposed_view_stays_a_view_through_div_mod():
    v = ShapeTracker.contiguous((4, 6)).permute((1, 0)).reshape((24,))
    assert v.strides() is None and "//" in str(v.index) and "%" in str(v.index)
    back = v.reshape((6, 4)).permute((1, 0))
    assert back.is_contiguous()  # the div/mod arithmetic simplifies away again


def test_reshape_maps_runs_of_axes_on_their_own():
    """Splitting a head axis out of a permuted tensor and dropping a size-1 axis keep every index plain: no
    division over the whole (symbolic) size, which no simplifier could remove and which stops a GEMM from
    reading its operand in place."""
    b = lm.sym("batch", max=8)
    qkv = ShapeTracker.contiguous((b, 128, 1152)).reshape((b, 128, 3, 12, 32)).permute((2, 0, 3, 1, 4))
    q = qkv.slice([(0, 1, 1), (0, b, 1), (0, 12, 1), (0, 128, 1), (0, 32, 1)]).reshape((b, 12, 128, 32))
    assert "//" not in str(q.index) and "%" not in str(q.index)
    strides, offset = q.strides()
    assert strides == [147456, 32, 1152, 1] and offset == 0


def test_symbolic_round_trip_simplifies_back():
    n = lm.sym("n")
    v = ShapeTracker.contiguous((n, 3)).permute((1, 0)).reshape((3 * n,)).reshape((3, n)).permute((1, 0))
    assert v.is_contiguous()


def test_unit_dim_reshapes_of_symbolic_views_stay_strided():
    # inserting or dropping unit dims keeps every axis's own index: no (a * seq + b) // seq left behind
    b, s = lm.sym("b"), lm.sym("s")
    v = ShapeTracker.contiguous((b, s, 8)).reshape((b, s, 1, 8)).expand((b, s, 5, 8))
    strides, offset = v.strides()
    assert [str(x) for x in strides] == [str(as_expr(8 * s)), "8", "0", "1"] and offset == 0
    w = ShapeTracker.contiguous((2, 1, 3)).permute((2, 1, 0)).reshape((3, 2))
    assert [x.value for x in w.strides()[0]] == [1, 3]
    a = np.arange(6).reshape(2, 1, 3)
    np.testing.assert_array_equal(read_view(a, w, {}), a.transpose(2, 1, 0).reshape(3, 2))


def test_regrouping_trailing_dims_keeps_symbolic_leading_axes_strided():
    # [b, s, 24] -> [b, s, 2, 12] (attention heads): only the last axis is regrouped, b and s keep their index
    b, s = lm.sym("b"), lm.sym("s")
    heads = ShapeTracker.contiguous((b, s, 24)).slice([(0, b, 1), (0, s, 1), (8, 16, 1)]).reshape((b, s, 2, 4))
    strides, offset = heads.permute((0, 2, 1, 3)).strides()
    assert [str(x) for x in strides] == [str(as_expr(24 * s)), "4", "24", "1"] and offset == 8
    a = np.arange(2 * 3 * 24).reshape(2, 3, 24)
    want = a[:, :, 8:16].reshape(2, 3, 2, 4).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(read_view(a, heads.permute((0, 2, 1, 3)), {"b": 2, "s": 3}), want)


def test_strides_of_plain_views():
    v = ShapeTracker.contiguous((2, 3, 4)).permute((2, 0, 1))
    strides, offset = v.strides()
    assert [s.value for s in strides] == [1, 12, 4] and offset == 0
    assert ShapeTracker.contiguous((3, 1)).expand((3, 5)).strides()[0][1] == 0


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda v: v.reshape((5, 5)), "cannot view shape"),
        (lambda v: v.permute((0, 0)), "not a permutation"),
        (lambda v: v.expand((4, 7)), "cannot expand"),
        (lambda v: v.slice([(0, 9, 1), (0, 6, 1)]), "outside"),
        (lambda v: v.slice([(0, 4, 0), (0, 6, 1)]), "step"),
        (lambda v: v.pad([(-1, 0), (0, 0)]), "must not be negative"),
        (lambda v: v.flip([5]), "out of range"),
    ],
)
def test_bad_movement_raises_shape_error_naming_op_and_shape(make, message):
    with pytest.raises(ShapeError, match=message):
        make(ShapeTracker.contiguous((4, 6)))


def test_views_from_hostile_json_are_rejected():
    for bad in [
        {"base": [4], "ops": [["teleport", []]]},
        {"base": [4], "ops": [["slice", [[0, 99, 1]]]]},
        {"base": [4], "ops": [["reshape", [5]]]},
        {"base": "x", "ops": []},
        {"base": [["var", "n", 1, 4]], "ops": [["reshape", [["mul", ["var", "n", 1, 4], 2]]]]},
    ]:
        with pytest.raises(ShapeError):
            ShapeTracker.from_json(bad)
