"""Gathers, scatters, masks and triangles against PyTorch, with valid random int64 indices."""

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import luminal as lm
import luminal.functional as F
from tests.opcheck import check

rng = np.random.default_rng(7)


def ints(low, high, shape):
    return rng.integers(low, high, size=shape).astype(np.int64)


def floats(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def distinct(n, shape, dim):
    """Indices below n that never repeat along `dim` (so a scatter has one writer per slot, as torch needs)."""
    moved = list(shape)
    moved.append(moved.pop(dim))
    rows = [rng.permutation(n)[: moved[-1]] for _ in range(int(np.prod(moved[:-1])))]
    return np.moveaxis(np.array(rows, np.int64).reshape(moved), -1, dim)


# ---- gathers -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim, index_shape", [(0, (3, 5)), (1, (4, 2)), (-1, (2, 7)), (1, (4, 5))])
def test_gather(dim, index_shape):
    x = floats(4, 5)
    index = ints(0, x.shape[dim], index_shape)
    check("gather", lambda x, i: torch.gather(x, dim, i), lambda x, i: F.gather(x, dim, i), inputs=[x, index])


def test_gather_3d_and_dtypes():
    x = rng.integers(-9, 9, size=(3, 4, 5)).astype(np.int32)
    index = ints(0, 4, (3, 6, 2))
    check("gather", lambda x, i: x.gather(1, i), lambda x, i: x.gather(1, i), inputs=[x, index])
    check("gather", lambda x, i: x.gather(2, i), lambda x, i: x.gather(2, i), inputs=[x > 0, ints(0, 5, (2, 4, 3))])


def test_take_along_dim():
    x, i = floats(4, 5), ints(0, 5, (4, 3))
    check(
        "take_along_dim",
        lambda x, i: torch.take_along_dim(x, i, 1),
        lambda x, i: F.take_along_dim(x, i, 1),
        inputs=[x, i],
    )
    check(
        "take_along_dim",
        lambda x, i: torch.take_along_dim(x, i, 0),
        lambda x, i: F.take_along_dim(x, i, 0),
        inputs=[x, ints(0, 4, (2, 1))],
    )
    check("take_along_dim", torch.take_along_dim, F.take_along_dim, inputs=[x, ints(0, 20, (6,))])


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select(dim):
    x = floats(4, 5, 6)
    index = ints(0, x.shape[dim], (7,))
    check(
        "index_select",
        lambda x, i: torch.index_select(x, dim, i),
        lambda x, i: F.index_select(x, dim, i),
        inputs=[x, index],
    )


def test_take():
    x = floats(4, 5)
    check("take", torch.take, F.take, inputs=[x, ints(-20, 20, (3, 4))])
    check("take", lambda x, i: x.take(i), lambda x, i: x.take(i), inputs=[x.astype(np.int64), ints(0, 20, (6,))])


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_embedding(dtype):
    ids = ints(0, 10, (3, 5))
    weight = floats(10, 4).astype(np.float32)
    weight = torch.from_numpy(weight).to(getattr(torch, dtype)).float().numpy()
    if dtype == "bfloat16":
        import ml_dtypes

        weight = weight.astype(ml_dtypes.bfloat16)
    else:
        weight = weight.astype(dtype)
    check("embedding", TF.embedding, F.embedding, inputs=[ids, weight], dtype=dtype)
    check(
        "embedding",
        lambda i, w: TF.embedding(i, w, padding_idx=0),
        lambda i, w: F.embedding(i, w, padding_idx=0),
        inputs=[ints(0, 10, (7,)), weight],
        dtype=dtype,
    )


# ---- scatters ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [0, 1])
def test_scatter(dim):
    x = floats(5, 6)
    index_shape = (3, 4) if dim == 0 else (5, 3)
    index = distinct(x.shape[dim], index_shape, dim)
    src = floats(5, 5)  # larger than index: only src[:i0, :i1] is used
    check(
        "scatter",
        lambda x, i, s: torch.scatter(x, dim, i, s),
        lambda x, i, s: F.scatter(x, dim, i, s),
        inputs=[x, index, src],
    )
    check(
        "scatter",
        lambda x, i: x.scatter(dim, i, 2.5),
        lambda x, i: x.scatter(dim, i, 2.5),
        inputs=[x, index],
    )
    check(
        "scatter",
        lambda x, i: x.scatter(dim, i, value=-1),
        lambda x, i: x.scatter(dim, i, value=-1),
        inputs=[x.astype(np.int64), index],
    )


def test_scatter_same_leading_dim():
    # every input shares the leading dim, so this also runs with that dim symbolic. The destination is
    # computed (x + 0, so contiguous) while index and src are strided views in the non-contiguous variant.
    x, src = floats(4, 6), floats(4, 5)
    index = distinct(6, (4, 3), 1)
    check(
        "scatter",
        lambda x, i, s: x.scatter(1, i, s),
        lambda x, i, s: (x + 0).scatter(1, i, s),
        inputs=[x, index, src],
    )


def test_scatter_into_strided_view():
    x, index = floats(6, 5), distinct(6, (3, 5), 0)
    g = lm.Graph()
    xt, i = g.input("x", (5, 6)), g.input("i", (3, 5), dtype=lm.int64)
    xt.t().scatter(0, i, 1.0).output("y")
    got = lm.run(g, {"x": np.ascontiguousarray(x.T), "i": index})["y"]
    np.testing.assert_array_equal(got, torch.from_numpy(x).scatter(0, torch.from_numpy(index), 1.0).numpy())


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_add(dim):
    x = floats(4, 6)
    index = ints(0, x.shape[dim], (4, 3) if dim else (6, 6))  # repeats are summed
    src = floats(*index.shape)
    check(
        "scatter_add",
        lambda x, i, s: torch.scatter_add(x, dim, i, s),
        lambda x, i, s: F.scatter_add(x, dim, i, s),
        inputs=[x, index, src],
        reduction=True,
    )
    check(
        "scatter_add",
        lambda x, i, s: x.scatter(dim, i, s, reduce="add"),
        lambda x, i, s: x.scatter(dim, i, s, reduce="add"),
        inputs=[x, index, src],
        reduction=True,
    )


def test_scatter_add_ints_and_inf():
    x = rng.integers(-5, 5, size=(3, 5)).astype(np.int64)
    index = ints(0, 5, (3, 4))
    check(
        "scatter_add",
        lambda x, i, s: x.scatter_add(1, i, s),
        lambda x, i, s: x.scatter_add(1, i, s),
        inputs=[x, index, rng.integers(-5, 5, size=(3, 4)).astype(np.int64)],
    )
    src = floats(3, 4)
    src[0, 0] = np.inf  # a one-hot blend would turn the unmatched slots into nan
    check(
        "scatter_add",
        lambda x, i, s: x.scatter_add(1, i, s),
        lambda x, i, s: x.scatter_add(1, i, s),
        inputs=[floats(3, 5), index, src],
        reduction=True,
    )


def test_index_put():
    x = floats(5, 4, 3)
    rows, cols = rng.permutation(5)[:3].astype(np.int64), rng.permutation(4)[:3].astype(np.int64)
    v = floats(3, 3)
    check(
        "index_put",
        lambda x, r, c, v: torch.index_put(x, (r, c), v),
        lambda x, r, c, v: F.index_put(x, (r, c), v),
        inputs=[x, rows, cols, v],
    )
    check(
        "index_put",
        lambda x, r: x.index_put((r,), torch.tensor(7.0)),
        lambda x, r: x.index_put((r,), 7.0),
        inputs=[x, -1 - rows],
    )
    dup = ints(-5, 5, (6,))
    check(
        "index_put",
        lambda x, r, v: x.index_put((r,), v, accumulate=True),
        lambda x, r, v: x.index_put((r,), v, accumulate=True),
        inputs=[x, dup, floats(6, 4, 3)],
        reduction=True,
    )


# ---- masks and triangles -------------------------------------------------------------------------------


def test_masked_fill():
    x = floats(4, 5)
    mask = rng.random((4, 5)) < 0.5
    check(
        "masked_fill",
        lambda x, m: x.masked_fill(m, -float("inf")),
        lambda x, m: x.masked_fill(m, -float("inf")),
        inputs=[x, mask],
    )
    check(
        "masked_fill",
        lambda x, m: torch.masked_fill(x, m, 2),
        lambda x, m: F.masked_fill(x, m, 2),
        inputs=[x, mask[:1]],
    )  # the mask broadcasts over rows
    check(
        "masked_fill", lambda x, m: x.masked_fill(m, x[0, 0]), lambda x, m: x.masked_fill(m, x[0, 0]), inputs=[x, mask]
    )
    xi = rng.integers(-9, 9, size=(4, 5)).astype(np.int32)
    check("masked_fill", lambda x, m: x.masked_fill(m, 3), lambda x, m: x.masked_fill(m, 3), inputs=[xi, mask])
    inf = x.copy()
    inf[0, :] = np.inf  # kept values stay exact, infinities included
    check("masked_fill", lambda x, m: x.masked_fill(m, 0.0), lambda x, m: x.masked_fill(m, 0.0), inputs=[inf, mask])


def test_one_hot():
    check("one_hot", lambda i: TF.one_hot(i, 6), lambda i: F.one_hot(i, 6), inputs=[ints(0, 6, (3, 4))])
    check("one_hot", lambda i: TF.one_hot(i, 3), lambda i: F.one_hot(i, 3), inputs=[ints(0, 3, (5,))])


@pytest.mark.parametrize("diagonal", [0, 1, -1, 3, -5])
def test_tril_triu(diagonal):
    check("tril", lambda x: x.tril(diagonal), lambda x: x.tril(diagonal), shapes=[(4, 5)])
    check("triu", lambda x: torch.triu(x, diagonal), lambda x: F.triu(x, diagonal), shapes=[(2, 4, 3)])


def test_tril_triu_dtypes_and_inf():
    check("tril", torch.tril, F.tril, shapes=[(3, 4)], dtype="int64", low=-9, high=9)
    check("triu", torch.triu, F.triu, shapes=[(3, 3)], dtype="bool")
    x = floats(4, 4)
    x[3, :] = np.inf  # masked with a blend, inf * 0 would give nan above the diagonal
    check("triu", lambda x: x.triu(1), lambda x: x.triu(1), inputs=[x])


# ---- errors --------------------------------------------------------------------------------------------


def test_errors():
    g = lm.Graph()
    x, i = g.input("x", (4, 5)), g.input("i", (3, 6), dtype=lm.int64)
    with pytest.raises(lm.ShapeError, match=r"gather: index shape \(3, 6\) does not fit input shape \(4, 5\)"):
        x.gather(0, i)
    with pytest.raises(lm.ShapeError, match=r"gather: dim 2 is out of range for shape \(4, 5\)"):
        x.gather(2, i)
    with pytest.raises(lm.DTypeError, match="index tensors must be integers, got float32"):
        x.gather(0, x)
    with pytest.raises(lm.ShapeError, match=r"index_select: index must be 1-d, got \(3, 6\)"):
        x.index_select(0, i)
    with pytest.raises(lm.ShapeError, match=r"scatter: index shape \(3, 6\) does not fit src shape \(4, 5\)"):
        g.input("y", (4, 6)).scatter(1, i, x)
    with pytest.raises(lm.DTypeError, match="scatter: src is int64 but input is float32"):
        x.scatter(1, i[:, :5], i)
    with pytest.raises(lm.DTypeError, match="masked_fill: mask must be bool, got int64"):
        x.masked_fill(i, 1.0)
    with pytest.raises(lm.ShapeError, match="one_hot: give num_classes"):
        F.one_hot(i)
    with pytest.raises(lm.ShapeError, match=r"tril: needs at least 2 dims, got \(3,\)"):
        g.input("v", (3,)).tril()
    with pytest.raises(lm.ShapeError, match=r"embedding: weight must be 2-d, got \(4, 5, 1\)"):
        F.embedding(i, g.input("w", (4, 5, 1)))
    with pytest.raises(lm.ShapeError, match=r"index_put: 3 index tensors for shape \(4, 5\)"):
        x.index_put((i, i, i), 1.0)
