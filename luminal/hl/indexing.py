"""Indexing with integer tensors, scatters, masks and triangles.

Every op here computes, per output element, the row-major position it reads in the flattened source
(or writes in the flattened destination): the data-dependent parts are index tensors times strides,
the rest is one Iota expression of the output's indices. Then a single Gather (or Scatter) moves the data.
Selections use `comparison.where`, which is the same idea: one Gather from the candidates stacked.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from luminal import dtypes as dt
from luminal.dtypes import DTypeError
from luminal.hl import comparison as C
from luminal.hl import movement as M
from luminal.hl import prim
from luminal.symbolic import Dim, Expr, as_dim, as_expr
from luminal.tensor import Tensor
from luminal.view import ShapeError, contiguous_strides, format_shape, idx, provably_le

Coord = Expr | Tensor  # an expression of the output's indices, or an int64 tensor of the output's shape


# ---- helpers: index arithmetic -------------------------------------------------------------------------


def _const_int(graph, value: Dim, shape: Sequence[Dim]) -> Tensor:
    """An int64 tensor of `shape` holding `value` (a symbolic value comes from an Iota of that expression)."""
    v = as_dim(value)
    return prim.scalar(graph, v, dt.int64, shape) if isinstance(v, int) else prim.iota(graph, v, shape)


def _flat_index(x: Tensor, coords: Sequence[Coord], shape: Sequence[Dim]) -> Tensor:
    """sum_k coords[k] * stride_k: the row-major position in `x` that each element of `shape` addresses."""
    offset, flat = as_expr(0), None
    for c, stride in zip(coords, contiguous_strides(x.shape)):
        if isinstance(c, Tensor):
            term = c if stride == 1 else prim.mul(c, _const_int(x.graph, stride, shape))
            flat = term if flat is None else prim.add(flat, term)
        else:
            offset = offset + c * stride
    if flat is None or offset != 0:
        base = prim.iota(x.graph, offset, shape)
        flat = base if flat is None else prim.add(flat, base)
    return flat


def gather_at(x: Tensor, coords: Sequence[Coord], shape: Sequence[Dim]) -> Tensor:
    """y[i] = x[coords(i)]: one Gather of the flattened x."""
    return prim.gather(x, _flat_index(x, coords, shape))


def _wrap(i: Tensor, n: Dim) -> Tensor:
    negative = prim.cast(prim.less_than(i, prim.full_like(i, 0)), dt.int64)
    return prim.add(i, prim.mul(negative, _const_int(i.graph, n, i.shape)))  # i + n * (i < 0)


def _index(key: Any, graph, op: str, wrap: Dim | None = None) -> Tensor:
    """An int64 index tensor from a Tensor, list or array of ints; a bool mask is refused. With `wrap` (the
    indexed size), negative indices count from the end: literals are fixed here, tensors at run time."""
    if isinstance(key, Tensor):
        if key.dtype == dt.bool_:
            raise ShapeError(f"{op}: a boolean mask index has a data-dependent shape; use masked_fill or where")
        if not key.dtype.is_int:
            raise DTypeError(f"{op}: index tensors must be integers, got {key.dtype.name}")
        key = prim.cast(key, dt.int64)
        return key if wrap is None else _wrap(key, wrap)
    arr = np.asarray(key)
    if arr.size == 0:
        arr = arr.astype(np.int64)
    if arr.dtype == np.bool_:
        raise ShapeError(f"{op}: a boolean mask index has a data-dependent shape; use masked_fill or where")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{op}: cannot index with {arr.dtype} values {key!r:.60}")
    from luminal.hl import creation
    from luminal.hl.movement import IndexOutOfRange

    if isinstance(wrap, int):
        bad = arr[(arr < -wrap) | (arr >= wrap)]
        if bad.size:
            raise IndexOutOfRange(f"{op}: index {bad.flat[0]} is out of range for a dim of size {wrap}")
        arr = arr % max(wrap, 1)
    out = creation.tensor(graph, arr, dt.int64)
    return _wrap(out, wrap) if wrap is not None and arr.size and arr.min() < 0 else out


def _fits(index: Tensor, x: Tensor, skip: int | None, op: str, what: str = "input") -> None:
    """torch's rule for gather/scatter: index.size(k) <= x.size(k) on every dim but `skip`, same rank."""
    ok = index.ndim == x.ndim and all(
        k == skip or provably_le(as_expr(a), as_expr(b)) for k, (a, b) in enumerate(zip(index.shape, x.shape))
    )
    if not ok:
        raise ShapeError(
            f"{op}: index shape {format_shape(index.shape)} does not fit {what} shape {format_shape(x.shape)}"
            + (f" outside dim {skip}" if skip is not None else "")
        )


def _along(index: Tensor, d: int) -> list[Coord]:
    """Coordinates that read `index` along dim d and the element's own position on every other dim."""
    return [index if k == d else idx(k, n) for k, n in enumerate(index.shape)]


# ---- gathers -------------------------------------------------------------------------------------------


def _advanced(x: Tensor, dims: list[int], keys: Sequence[Any], front: bool, op: str) -> tuple[list, list]:
    """Coordinates and shape of x[..., i0, i1, ...]: the broadcast index shape replaces the indexed dims in
    place when they are adjacent, else it goes first (torch's rule); negative indices count from the end."""
    idxs = [_index(k, x.graph, op, wrap=x.shape[d]) for d, k in zip(dims, keys)]
    bshape = list(prim.broadcast_shapes(*(t.shape for t in idxs), op=op))
    rest = [k for k in range(x.ndim) if k not in dims]
    at = 0 if front else sum(1 for k in rest if k < dims[0])
    shape = [x.shape[k] for k in rest[:at]] + bshape + [x.shape[k] for k in rest[at:]]
    coords: list[Any] = [None] * x.ndim
    for pos, k in enumerate(rest):
        j = pos if pos < at else pos + len(bshape)
        coords[k] = idx(j, shape[j])
    for d, t in zip(dims, idxs):
        placed = [1] * (at + len(bshape) - t.ndim) + list(t.shape) + [1] * (len(rest) - at)
        coords[d] = t.with_view(t.st.reshape(placed).expand(shape))
    return coords, shape


def advanced_index(x: Tensor, dims: list[int], keys: Sequence[Any], front: bool) -> Tensor:
    """x indexed on `dims` by integer tensors/lists (what `x[idx]` does; see movement.getitem)."""
    coords, shape = _advanced(x, dims, keys, front, "getitem")
    return gather_at(x, coords, shape)


def gather(input: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False) -> Tensor:  # noqa: A002
    """torch.gather: out[i][j] = input[index[i][j]][j] (dim 0): index on dim, the element's position elsewhere."""
    d = M._axis(input, dim, "gather")
    index = _index(index, input.graph, "gather")
    _fits(index, input, d, "gather")
    return gather_at(input, _along(index, d), index.shape)


def take_along_dim(input: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:  # noqa: A002
    """torch.take_along_dim: gather after broadcasting input and indices on every dim but `dim`."""
    if dim is None:
        return gather(M.flatten(input), 0, M.flatten(indices))
    d = M._axis(input, dim, "take_along_dim")
    if indices.ndim != input.ndim:
        raise ShapeError(
            f"take_along_dim: {format_shape(indices.shape)} and {format_shape(input.shape)} differ in rank"
        )
    common = list(
        prim.broadcast_shapes(*[[1 if k == d else n for k, n in enumerate(t.shape)] for t in (input, indices)])
    )
    x = M.expand(input, [input.shape[d] if k == d else n for k, n in enumerate(common)])
    return gather(x, d, M.expand(indices, [indices.shape[d] if k == d else n for k, n in enumerate(common)]))


def index_select(input: Tensor, dim: int, index: Tensor) -> Tensor:  # noqa: A002
    """torch.index_select: the entries of `index` (1-d) along `dim`, every other dim kept."""
    d = M._axis(input, dim, "index_select")
    index = _index(index, input.graph, "index_select")
    if index.ndim > 1:
        raise ShapeError(f"index_select: index must be 1-d, got {format_shape(index.shape)}")
    n = index.numel()
    shape = [n if k == d else s for k, s in enumerate(input.shape)]
    column = index.with_view(index.st.reshape([n if k == d else 1 for k in range(input.ndim)]).expand(shape))
    coords = [column if k == d else idx(k, s) for k, s in enumerate(shape)]
    return gather_at(input, coords, shape)


def take(input: Tensor, index: Tensor) -> Tensor:  # noqa: A002
    """torch.take: input read as 1-d at `index` (negative counts from the end); the result has index's shape."""
    return prim.gather(input, _index(index, input.graph, "take", wrap=input.numel()))


def embedding(
    input: Tensor,  # noqa: A002
    weight: Tensor,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """F.embedding: weight[input] for any index shape (padding_idx only matters for gradients)."""
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be 2-d, got {format_shape(weight.shape)}")
    if max_norm is not None:
        raise NotImplementedError("embedding: max_norm renormalises the weight in place; graphs have no mutation")
    ids = _index(input, weight.graph, "embedding")
    shape = [*ids.shape, weight.shape[1]]
    rows = ids.with_view(ids.st.reshape([*ids.shape, 1]).expand(shape))
    return gather_at(weight, [rows, idx(ids.ndim, weight.shape[1])], shape)


# ---- scatters ------------------------------------------------------------------------------------------


def _scatter_args(input: Tensor, dim: int, index: Any, src: Any, op: str) -> tuple[int, Tensor, Tensor]:  # noqa: A002
    """The checked dim, int64 index and the src values the index covers (src[:i0, :i1, ...] or a filled value)."""
    d = M._axis(input, dim, op)
    index = _index(index, input.graph, op)
    _fits(index, input, d, op)
    if not isinstance(src, Tensor):
        return d, index, prim.scalar(input.graph, src, input.dtype, index.shape)
    _fits(index, src, None, op, "src")
    if src.dtype != input.dtype:
        raise DTypeError(f"{op}: src is {src.dtype.name} but input is {input.dtype.name}")
    return d, index, src.with_view(src.st.slice([(0, n, 1) for n in index.shape]))  # src[:i0, :i1, ...]


def scatter(
    input: Tensor,  # noqa: A002
    dim: int,
    index: Tensor,
    src: Any = None,
    *,
    value: Any = None,
    reduce: str | None = None,
) -> Tensor:
    """torch.scatter: out = input; out[index[i][j]][j] = src[i][j] (dim 0). `src` may be a number (the value form).
    Where an index repeats, one of the values lands (torch leaves the choice unspecified too)."""
    src = value if src is None else src
    if src is None:
        raise TypeError("scatter: give src (a tensor) or value (a number)")
    if reduce == "add":
        if not isinstance(src, Tensor):
            src = prim.scalar(input.graph, src, input.dtype, index.shape)
        return scatter_add(input, dim, index, src)
    if reduce is not None:
        raise NotImplementedError(f"scatter: reduce={reduce!r} is not supported (only 'add')")
    d, index, values = _scatter_args(input, dim, index, src, "scatter")
    return prim.scatter(input, _flat_index(input, _along(index, d), index.shape), values)


def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:  # noqa: A002
    """torch.scatter_add, repeated indexes summing: out[j] = input[j] + sum_i (index[i] == j) * src[i] along dim,
    as a one-hot comparison (index.shape + (n,)) whose matches pick src exactly, summed over the index dim."""
    d, index, values = _scatter_args(input, dim, index, src, "scatter_add")
    n = input.shape[d]
    shape = [*index.shape, n]
    hits = C.eq(M.expand(M.unsqueeze(index, -1), shape), prim.iota(input.graph, idx(index.ndim, n), shape))
    picked = C.where(hits, M.unsqueeze(values, -1), prim.scalar(input.graph, 0, input.dtype))
    summed = M.movedim(prim.sum_reduce(picked, d), -1, d)  # index.shape with dim d now of size n
    widths = [
        (0, 0) if k == d else (0, as_dim(as_expr(a) - b)) for k, (a, b) in enumerate(zip(input.shape, summed.shape))
    ]
    return prim.add(input, summed.with_view(summed.st.pad(widths)))


def index_put(input: Tensor, indices: Sequence[Any], values: Any, accumulate: bool = False) -> Tensor:  # noqa: A002
    """torch.index_put: input[indices] = values (broadcast), or += with accumulate (repeats summing)."""
    indices = list(indices)
    if not indices or len(indices) > input.ndim:
        raise ShapeError(f"index_put: {len(indices)} index tensors for shape {format_shape(input.shape)}")
    coords, shape = _advanced(input, list(range(len(indices))), indices, False, "index_put")
    if not isinstance(values, Tensor):
        values = prim.scalar(input.graph, values, input.dtype)
    values = M.expand(prim.cast(values, input.dtype), shape)
    flat = _flat_index(input, coords, shape)
    if not accumulate:
        return prim.scatter(input, flat, values)
    summed = scatter_add(M.flatten(input), 0, M.flatten(flat), M.flatten(values))
    return M.reshape(summed, input.shape)


# ---- masks ---------------------------------------------------------------------------------------------


def masked_fill(input: Tensor, mask: Tensor, value: Any) -> Tensor:  # noqa: A002
    """torch.masked_fill: `value` where mask is True, input elsewhere (shapes broadcast)."""
    if mask.dtype != dt.bool_:
        raise DTypeError(f"masked_fill: mask must be bool, got {mask.dtype.name}")
    if isinstance(value, Tensor):
        if value.ndim:
            raise ShapeError(f"masked_fill: value must be a 0-dim tensor, got {format_shape(value.shape)}")
        fill = prim.cast(value, input.dtype)
    else:
        fill = prim.scalar(input.graph, value, input.dtype)
    return C.where(mask, fill, input)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """F.one_hot: int64 (..., num_classes) with 1 at each index; num_classes must be given (it is data-dependent)."""
    if not isinstance(num_classes, int) or num_classes < 0:
        raise ShapeError("one_hot: give num_classes; inferring it (max + 1) would make the shape data-dependent")
    ids = _index(tensor, tensor.graph, "one_hot")
    shape = [*ids.shape, num_classes]
    classes = prim.iota(ids.graph, idx(ids.ndim, num_classes), shape)
    return prim.cast(C.eq(M.expand(M.unsqueeze(ids, -1), shape), classes), dt.int64)


def _triangle(x: Tensor, keep: Callable[[Expr, Expr], Expr], op: str) -> Tensor:
    if x.ndim < 2:
        raise ShapeError(f"{op}: needs at least 2 dims, got {format_shape(x.shape)}")
    rows, cols = x.shape[-2:]
    mask = prim.cast(prim.iota(x.graph, keep(idx(0, rows), idx(1, cols)), [rows, cols]), dt.bool_)
    return C.where(mask, x, prim.scalar(x.graph, 0, x.dtype))


def tril(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    return _triangle(input, lambda r, c: c < r + diagonal + 1, "tril")  # keep column - row <= diagonal


def triu(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    return _triangle(input, lambda r, c: r + diagonal < c + 1, "triu")  # keep column - row >= diagonal


METHODS = (
    "gather",
    "take_along_dim",
    "index_select",
    "take",
    "scatter",
    "scatter_add",
    "index_put",
    "masked_fill",
    "tril",
    "triu",
)

__all__ = list(METHODS) + ["embedding", "one_hot"]
