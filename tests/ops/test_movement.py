"""Movement ops (views), indexing with [], padding, and joining/splitting, against PyTorch."""

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import luminal as lm
import luminal.functional as F
from tests.opcheck import check

SLICES = [
    1,
    -1,
    (1, 2),
    (-2, slice(1, 5), -1),
    slice(1, 4),
    slice(None, None, 2),
    (slice(1, None, 3), -2),
    (Ellipsis, 1),
    (None, Ellipsis),
    (slice(None), None, 2),
    (Ellipsis, slice(-3, None)),
    (slice(-4, -1), Ellipsis, slice(None, None, 2)),
    (2, slice(10, 20)),  # empty: past the end
    slice(4, 2),  # empty: stop before start
    slice(-100, 100),  # clamped
    (True, 0),
    (slice(None), False),
    (None, 1, None, slice(2, 6, 3), None),
]


@pytest.mark.parametrize("key", SLICES, ids=repr)
def test_getitem_basic(key):
    # the symbolic variant slices a symbolic leading dim with constant ranges (clamped like Python)
    check("getitem", lambda x: x[key], lambda x: x[key], shapes=[(5, 6, 7)])


@pytest.mark.parametrize("key", [slice(1, 3), slice(-2, None), slice(None, -1), slice(3, None), slice(None, None, 3)])
def test_getitem_symbolic_small_sizes(key):
    # a symbolic dim whose run-time size is below the slice's bounds (n = 2): the range shrinks or empties
    check("getitem", lambda x: x[key], lambda x: x[key], shapes=[(2, 3)])


def test_getitem_symbolic_bounds():
    # in the symbolic variant the bounds are expressions of the symbolic size
    check("getitem", lambda x: x[: x.shape[0] - 1], lambda x: x[: x.shape[0] - 1], shapes=[(4, 3)])
    check("getitem", lambda x: x[1 : x.shape[0], 1:], lambda x: x[1 : x.shape[0], 1:], shapes=[(4, 3)])
    check("getitem", lambda x: x[x.shape[0] - 2 :: 2], lambda x: x[x.shape[0] - 2 :: 2], shapes=[(5, 3)])


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool", "float64", "float16", "bfloat16"])
def test_getitem_dtypes(dtype):
    check("getitem", lambda x: x[1:, ::2], lambda x: x[1:, ::2], shapes=[(4, 5)], dtype=dtype, low=-9, high=9)


ADVANCED = [
    [0, 2, -1],
    (slice(None), [1, 0, 1]),
    ([[0, 1], [2, 3]], 1),
    ([0, 1], slice(None), [1, 2]),  # separated advanced dims: the index dims go first
    (slice(None), [0, 1], [1, 2]),  # adjacent: they stay in place
    (0, slice(None), [1, 2]),  # torch applies ints first, so this one stays in place
    (None, [0, 3], None, 1),
    ([1], slice(2, 5)),
    (Ellipsis, [-1, 0]),
]


@pytest.mark.parametrize("key", ADVANCED, ids=repr)
def test_getitem_lists(key):
    check("getitem_advanced", lambda x: x[key], lambda x: x[key], shapes=[(4, 5, 6)])


def test_getitem_index_tensor():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 6, 3)).astype(np.float32)
    i = rng.integers(-5, 5, size=(2, 4)).astype(np.int64)
    j = rng.integers(0, 3, size=(4,)).astype(np.int64)
    check("getitem_advanced", lambda x, i: x[i], lambda x, i: x[i], inputs=[x, i])
    check("getitem_advanced", lambda x, i, j: x[i, :, j], lambda x, i, j: x[i, :, j], inputs=[x, i, j])
    check("getitem_advanced", lambda x, j: x[1:, j, ::2], lambda x, j: x[1:, j, ::2], inputs=[x, j % 3])
    i32 = rng.integers(0, 6, size=(3,)).astype(np.int32)
    check("getitem_advanced", lambda x, i: x[:, i.long()], lambda x, i: x[:, i], inputs=[x, i32])


def test_getitem_iterates_and_unpacks():
    g = lm.Graph()
    rows = list(g.input("x", (3, 4)))
    assert len(rows) == 3 and all(r.shape == (4,) for r in rows)


def test_getitem_errors():
    g = lm.Graph()
    x = g.input("x", (3, 4))
    with pytest.raises(lm.ShapeError, match=r"select: index 3 is out of range for dim 0 of shape \(3, 4\)"):
        x[3]
    with pytest.raises(IndexError, match="select: index -5"):
        x[:, -5]
    with pytest.raises(lm.ShapeError, match=r"too many indices \(3\) for a tensor of shape \(3, 4\)"):
        x[0, 0, 0]
    with pytest.raises(lm.ShapeError, match="step must be greater than zero"):
        x[::-1]
    with pytest.raises(lm.ShapeError, match="single ellipsis"):
        x[..., 0, ...]
    with pytest.raises(lm.ShapeError, match="boolean mask"):
        x[g.input("m", (3,), dtype=lm.bool)]
    with pytest.raises(lm.ShapeError, match="boolean mask"):
        x[[True, False, True]]
    with pytest.raises(IndexError, match=r"getitem: index 3 is out of range for a dim of size 3"):
        x[[0, 3]]
    with pytest.raises(TypeError, match="cannot index with str"):
        x["a"]


def test_select_narrow_unbind():
    check("select", lambda x: x.select(1, -2), lambda x: x.select(1, -2), shapes=[(3, 4, 5)])
    check("select", lambda x: x.select(0, 2), lambda x: x.select(0, 2), shapes=[(3, 4)])
    check("narrow", lambda x: x.narrow(1, 1, 3), lambda x: x.narrow(1, 1, 3), shapes=[(3, 5, 2)])
    check("narrow", lambda x: torch.narrow(x, -1, -3, 2), lambda x: F.narrow(x, -1, -3, 2), shapes=[(3, 5)])
    check("unbind", lambda x: x.unbind(1), lambda x: x.unbind(1), shapes=[(3, 4, 2)])
    with pytest.raises(lm.ShapeError, match=r"narrow: start 2, length 4 do not fit dim 0 of \(5,\)"):
        F.narrow(lm.Graph().input("x", (5,)), 0, 2, 4)
    with pytest.raises(lm.ShapeError, match=r"unbind: dim 0 of shape \(n,\) must be concrete"):
        lm.Graph().input("x", (lm.sym("n"),)).unbind(0)


def test_view_ops():
    check("reshape", lambda x: x.reshape(4, -1), lambda x: x.reshape(4, -1), shapes=[(2, 3, 4)])
    check(
        "reshape",
        lambda x: torch.reshape(x, (x.shape[0], 12)),
        lambda x: F.reshape(x, (x.shape[0], 12)),
        shapes=[(2, 3, 4)],
    )
    check("view", lambda x: x.view(-1), lambda x: x.view(-1), shapes=[(3, 4)], dtype="int64")
    check("permute", lambda x: x.permute(2, 0, 1), lambda x: x.permute(2, 0, 1), shapes=[(2, 3, 4)])
    check("permute", lambda x: torch.permute(x, (-1, 0, 1)), lambda x: F.permute(x, (-1, 0, 1)), shapes=[(2, 3, 4)])
    check("transpose", lambda x: x.transpose(0, -1), lambda x: x.transpose(0, -1), shapes=[(2, 3, 4)])
    check("t", lambda x: x.t(), lambda x: x.t(), shapes=[(3, 5)], dtype="bool")
    check("squeeze", lambda x: x.squeeze(), lambda x: x.squeeze(), shapes=[(3, 1, 4, 1)])
    check("squeeze", lambda x: x.squeeze(-1), lambda x: x.squeeze(-1), shapes=[(3, 1, 4, 1)])
    check("squeeze", lambda x: x.squeeze((1, 2)), lambda x: x.squeeze((1, 2)), shapes=[(3, 1, 4, 1)])
    check("unsqueeze", lambda x: x.unsqueeze(0), lambda x: x.unsqueeze(0), shapes=[(3, 4)])
    check("unsqueeze", lambda x: torch.unsqueeze(x, -1), lambda x: F.unsqueeze(x, -1), shapes=[(3, 4)])
    check("flatten", lambda x: x.flatten(), lambda x: x.flatten(), shapes=[(2, 3, 4)])
    check("flatten", lambda x: x.flatten(1), lambda x: x.flatten(1), shapes=[(2, 3, 4)])
    check("flatten", lambda x: torch.flatten(x, 0, -2), lambda x: F.flatten(x, 0, -2), shapes=[(2, 3, 4)])
    check("unflatten", lambda x: x.unflatten(1, (2, -1)), lambda x: x.unflatten(1, (2, -1)), shapes=[(3, 6)])
    check("expand_as", lambda x, y: x.expand_as(y), lambda x, y: x.expand_as(y), shapes=[(1, 4), (3, 4)])
    g = lm.Graph()
    x = g.input("x", (2, 3, 4))
    with pytest.raises(lm.ShapeError, match=r"transpose: dim 3 is out of range for shape \(2, 3, 4\)"):
        x.transpose(0, 3)
    with pytest.raises(lm.ShapeError, match=r"permute: \[0, 1\] does not name every axis of \(2, 3, 4\)"):
        x.permute(0, 1)
    with pytest.raises(lm.ShapeError, match=r"reshape: cannot view shape \(2, 3, 4\) \(24 elements\) as \(5, 5\)"):
        x.reshape(5, 5)
    with pytest.raises(lm.ShapeError, match=r"flatten: start_dim 2 comes after end_dim 1"):
        x.flatten(2, 1)
    with pytest.raises(lm.ShapeError, match=r"unsqueeze: dim 4 is out of range for shape \(2, 3, 4\)"):
        x.unsqueeze(4)


def test_shape_ops():
    check("movedim", lambda x: torch.movedim(x, 0, -1), lambda x: F.movedim(x, 0, -1), shapes=[(2, 3, 4)])
    check("movedim", lambda x: x.movedim((0, 1), (2, 0)), lambda x: x.movedim((0, 1), (2, 0)), shapes=[(2, 3, 4)])
    check("moveaxis", lambda x: torch.moveaxis(x, 1, 0), lambda x: F.moveaxis(x, 1, 0), shapes=[(2, 3, 4)])
    check("swapaxes", lambda x: x.swapaxes(0, 2), lambda x: x.swapaxes(0, 2), shapes=[(2, 3, 4)])
    check("swapdims", lambda x: x.swapdims(-1, 1), lambda x: x.swapdims(-1, 1), shapes=[(2, 3, 4)])
    check("expand", lambda x: x.expand(2, -1, 4), lambda x: x.expand(2, -1, 4), shapes=[(3, 1)])
    check(
        "broadcast_to",
        lambda x: torch.broadcast_to(x, (4, x.shape[0], 5)),
        lambda x: F.broadcast_to(x, (4, x.shape[0], 5)),
        shapes=[(3, 1)],
    )
    check("view_as", lambda x, y: x.view_as(y), lambda x, y: x.view_as(y), shapes=[(4, 6, 1), (4, 3, 2)])
    check("reshape_as", lambda x, y: x.reshape_as(y), lambda x, y: x.reshape_as(y), shapes=[(4, 6), (8, 3)])
    with pytest.raises(lm.ShapeError, match=r"movedim: dim 3 is out of range for shape \(2, 3, 4\)"):
        F.movedim(lm.Graph().input("x", (2, 3, 4)), 3, 0)


def test_flip_roll():
    check("flip", lambda x: x.flip(0, 2), lambda x: x.flip(0, 2), shapes=[(3, 4, 5)])
    check("flip", lambda x: torch.flip(x, [-1]), lambda x: F.flip(x, [-1]), shapes=[(3, 4)], dtype="int32")
    check("fliplr", torch.fliplr, F.fliplr, shapes=[(3, 4)])
    check("flipud", torch.flipud, F.flipud, shapes=[(3, 4)], dtype="bool")
    check("roll", lambda x: x.roll(2, 1), lambda x: x.roll(2, 1), shapes=[(3, 5)])
    check("roll", lambda x: x.roll(-7, 0), lambda x: x.roll(-7, 0), shapes=[(4, 3)])  # gathers when dim 0 is symbolic
    check("roll", lambda x: x.roll((1, -2), (0, 2)), lambda x: x.roll((1, -2), (0, 2)), shapes=[(3, 4, 5)])
    check("roll", lambda x: torch.roll(x, 5), lambda x: F.roll(x, 5), shapes=[(3, 4)])
    check("roll", lambda x: x.roll(3, -1), lambda x: x.roll(3, -1), shapes=[(2, 3)], dtype="int64")
    with pytest.raises(lm.ShapeError, match="roll: 2 shifts for 1 dims"):
        F.roll(lm.Graph().input("x", (3,)), (1, 2), 0)


def test_repeat_tile_interleave():
    check("repeat", lambda x: x.repeat(2, 3), lambda x: x.repeat(2, 3), shapes=[(3, 4)])
    check("repeat", lambda x: x.repeat(2, 1, 3), lambda x: x.repeat(2, 1, 3), shapes=[(3, 4)], dtype="bool")
    check("tile", lambda x: x.tile((2,)), lambda x: x.tile((2,)), shapes=[(3, 4)])
    check("tile", lambda x: torch.tile(x, (2, 1, 2)), lambda x: F.tile(x, (2, 1, 2)), shapes=[(3, 4)])
    check(
        "repeat_interleave", lambda x: x.repeat_interleave(3, 1), lambda x: x.repeat_interleave(3, 1), shapes=[(3, 4)]
    )
    check(
        "repeat_interleave",
        lambda x: x.repeat_interleave(2),
        lambda x: x.repeat_interleave(2),
        shapes=[(3, 4)],
        dtype="int64",
    )
    with pytest.raises(lm.ShapeError, match=r"repeat: \[2\] must be non-negative ints, at least one per dim"):
        lm.Graph().input("x", (3, 4)).repeat(2)
    with pytest.raises(lm.ShapeError, match="repeat_interleave: repeats must be a non-negative int"):
        lm.Graph().input("x", (3, 4)).repeat_interleave(-1)


def test_chains():
    check(
        "chain",
        lambda x: x.permute(2, 0, 1)[1:, ::2].flip(0).reshape(-1, 3).t()[1],
        lambda x: x.permute(2, 0, 1)[1:, ::2].flip(0).reshape(-1, 3).t()[1],
        shapes=[(4, 3, 5)],
    )
    check(
        "chain",
        lambda x: x.transpose(0, 1)[:, None, 1:].expand(-1, 2, -1).repeat(1, 1, 2).roll(1, 2),
        lambda x: x.transpose(0, 1)[:, None, 1:].expand(-1, 2, -1).repeat(1, 1, 2).roll(1, 2),
        shapes=[(3, 4)],
    )


# ---- pad -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pad, value",
    [((1, 2), None), ((2, 0, 1, 3), 1.5), ((0, 1, 1, 0, 2, 1), -float("inf")), ((-1, 2), 0.0), ((1, -2, -1, 1), 3.0)],
)
def test_pad_constant(pad, value):
    check("pad", lambda x: TF.pad(x, pad, value=value), lambda x: F.pad(x, pad, value=value), shapes=[(4, 5, 6)])


@pytest.mark.parametrize("dtype", ["int64", "bool", "float16"])
def test_pad_constant_dtypes(dtype):
    check(
        "pad",
        lambda x: TF.pad(x, (1, 1, 2, 0), value=1),
        lambda x: F.pad(x, (1, 1, 2, 0), value=1),
        shapes=[(3, 4)],
        dtype=dtype,
        low=-5,
        high=5,
    )


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize(
    "pad, shape", [((2, 1), (2, 3, 5)), ((1, 2, 2, 0), (2, 3, 4, 5)), ((1, 1, 1, 2, 2, 0), (1, 2, 3, 4, 5))]
)
def test_pad_modes(mode, pad, shape):
    fns = (lambda x: TF.pad(x, pad, mode=mode), lambda x: F.pad(x, pad, mode=mode))
    if mode == "reflect":  # literal names: tests/op_coverage.py reads them from the source
        check("pad_reflect", *fns, shapes=[shape])
    elif mode == "replicate":
        check("pad_replicate", *fns, shapes=[shape])
    else:
        check("pad_circular", *fns, shapes=[shape])


def test_pad_errors():
    x = lm.Graph().input("x", (2, 3, 4))
    with pytest.raises(lm.ShapeError, match=r"pad: 3 widths do not form \(before, after\) pairs for \(2, 3, 4\)"):
        F.pad(x, (1, 2, 3))
    with pytest.raises(lm.ShapeError, match=r"pad: reflect widths \[4, 0\] must be below dim 2 of \(2, 3, 4\)"):
        F.pad(x, (4, 0), mode="reflect")
    with pytest.raises(lm.ShapeError, match=r"pad: circular widths \[5, 0\] exceed dim 2"):
        F.pad(x, (5, 0), mode="circular")
    with pytest.raises(ValueError, match="unknown mode 'wrap'"):
        F.pad(x, (1, 1), mode="wrap")


# ---- cat, stack, split ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dim, shapes",
    [
        (0, [(2, 3, 4), (1, 3, 4), (3, 3, 4)]),
        (1, [(2, 1, 4), (2, 3, 4)]),
        (-1, [(2, 3, 1), (2, 3, 2), (2, 3, 4)]),
        (0, [(4, 3), (4, 3)]),
    ],
)
def test_cat(dim, shapes):
    # the last case runs with dim 0 symbolic in both inputs: a cat along a symbolic dim
    check("cat", lambda *xs: torch.cat(xs, dim), lambda *xs: F.cat(xs, dim), shapes=shapes)


def test_cat_dtypes():
    rng = np.random.default_rng(2)
    ints = rng.integers(-5, 5, size=(2, 3)).astype(np.int32)
    floats = rng.standard_normal((1, 3)).astype(np.float32)
    check("cat", lambda a, b: torch.cat([a, b]), lambda a, b: F.concat([a, b]), inputs=[ints, floats])
    check(
        "cat", lambda a, b: torch.cat([a, b], 1), lambda a, b: F.cat([a, b], 1), shapes=[(3, 2), (3, 4)], dtype="bool"
    )
    check(
        "cat", lambda a: torch.cat([a, a * float("inf")], 0), lambda a: F.cat([a, a * float("inf")], 0), shapes=[(2, 3)]
    )


def test_stack_and_friends():
    check("stack", lambda a, b: torch.stack([a, b]), lambda a, b: F.stack([a, b]), shapes=[(3, 4), (3, 4)])
    check("stack", lambda a, b: torch.stack([a, b], -1), lambda a, b: F.stack([a, b], -1), shapes=[(3, 4), (3, 4)])
    check(
        "stack",
        lambda a, b: torch.stack((a, b), 1),
        lambda a, b: F.stack((a, b), 1),
        shapes=[(3, 4), (3, 4)],
        dtype="int64",
    )
    check("hstack", lambda a, b: torch.hstack([a, b]), lambda a, b: F.hstack([a, b]), shapes=[(3, 2), (3, 4)])
    check("hstack", lambda a, b: torch.hstack([a, b]), lambda a, b: F.hstack([a, b]), shapes=[(3,), (4,)])
    check("vstack", lambda a, b: torch.vstack([a, b]), lambda a, b: F.vstack([a, b]), shapes=[(4,), (2, 4)])
    check("dstack", lambda a, b: torch.dstack([a, b]), lambda a, b: F.dstack([a, b]), shapes=[(3, 4), (3, 4)])


def test_split_chunk():
    check("split", lambda x: x.split(2), lambda x: x.split(2), shapes=[(5, 3)], symbolic=False)  # needs a concrete dim
    check("split", lambda x: torch.split(x, [1, 3, 2], -1), lambda x: F.split(x, [1, 3, 2], -1), shapes=[(3, 6)])
    check("chunk", lambda x: x.chunk(3, 1), lambda x: x.chunk(3, 1), shapes=[(2, 7)])
    check("chunk", lambda x: torch.chunk(x, 4, 1), lambda x: F.chunk(x, 4, 1), shapes=[(2, 6)])
    check("tensor_split", lambda x: x.tensor_split(3, 1), lambda x: x.tensor_split(3, 1), shapes=[(2, 7)])
    check(
        "tensor_split",
        lambda x: x.tensor_split([1, -2, 9], 1),
        lambda x: x.tensor_split([1, -2, 9], 1),
        shapes=[(2, 7)],
    )
    n = lm.sym("n")
    halves = F.split(lm.Graph().input("x", (2 * n, 3)), [n, n])
    assert [h.shape for h in halves] == [(n, 3), (n, 3)]


def test_combine_errors():
    g = lm.Graph()
    a, b = g.input("a", (2, 3)), g.input("b", (2, 4))
    with pytest.raises(lm.ShapeError, match=r"cat: shapes \(2, 3\), \(2, 4\) differ outside dim 0"):
        F.cat([a, b])
    with pytest.raises(lm.ShapeError, match=r"cat: dim 2 is out of range for shape \(2, 3\)"):
        F.cat([a, a], 2)
    with pytest.raises(lm.ShapeError, match=r"stack: expects tensors of one shape, got \(2, 3\), \(2, 4\)"):
        F.stack([a, b])
    with pytest.raises(lm.ShapeError, match=r"split: sizes \[1, 2\] do not add up to dim 0 of \(2, 3\)"):
        a.split([1, 2], 0)
    with pytest.raises(lm.ShapeError, match=r"split: dim 0 of shape \(n, 3\) must be concrete"):
        g.input("s", (lm.sym("n"), 3)).split(2)
