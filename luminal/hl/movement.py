"""Movement ops: every one changes the view only (see luminal/view.py), never the data.

The exceptions read data through a Gather, because no view can express them: indexing with integer
tensors (luminal/hl/indexing.py does the arithmetic) and `roll` along a symbolic dim.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from luminal.symbolic import Dim, Expr, as_dim, as_expr
from luminal.tensor import Tensor
from luminal.view import ShapeError, ShapeTracker, dims_product, format_shape, idx, provably_le


class IndexOutOfRange(ShapeError, IndexError):
    """An integer index past a dim's end. Also an IndexError, so `for row in t` stops as it does in Python."""


def _axis(x: Tensor, d: int, op: str, extra: int = 0) -> int:
    rank = x.ndim + extra
    if isinstance(d, bool) or not isinstance(d, int) or not -max(rank, 1) <= d < max(rank, 1):
        raise ShapeError(f"{op}: dim {d} is out of range for shape {format_shape(x.shape)}")
    return d % max(rank, 1)


def _shape_arg(shape) -> list:
    return list(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else list(shape)


def _concrete(x: Tensor, d: int, op: str) -> int:
    n = x.shape[d]
    if not isinstance(n, int):
        raise ShapeError(f"{op}: dim {d} of shape {format_shape(x.shape)} must be concrete, not symbolic")
    return n


def _slice_axis(x: Tensor, d: int, start: Dim, stop: Dim, step: int = 1) -> Tensor:
    bounds = [(0, n, 1) for n in x.shape]
    bounds[d] = (start, stop, step)
    return x.with_view(x.st.slice(bounds))


def _pad_axis(x: Tensor, d: int, before: Dim, after: Dim) -> Tensor:
    if before == 0 and after == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[d] = (before, after)
    return x.with_view(x.st.pad(widths))


def _tile_view(st: ShapeTracker, reps: Sequence[int]) -> ShapeTracker:
    """Each axis k repeated reps[k] times end to end: (d0, d1) -> (1, d0, 1, d1) -> (r0, d0, r1, d1) -> merged."""
    split = [s for n in st.shape for s in (1, n)]
    spread = [s for r, n in zip(reps, st.shape) for s in (r, n)]
    return st.reshape(split).expand(spread).reshape([as_dim(as_expr(n) * r) for r, n in zip(reps, st.shape)])


# ---- shape ---------------------------------------------------------------------------------------------


def reshape(x: Tensor, *shape: Dim | Sequence[Dim]) -> Tensor:
    """torch.reshape: one dim may be -1 and is inferred."""
    dims = _shape_arg(shape)
    holes = [k for k, d in enumerate(dims) if isinstance(d, int) and d == -1]
    if len(holes) > 1:
        raise ShapeError(f"reshape: only one dim may be -1, got {dims}")
    if holes:
        known = dims_product([d for k, d in enumerate(dims) if k != holes[0]])
        total = x.st.numel()
        if known == 0:
            raise ShapeError(f"reshape: cannot infer -1 in {dims} for shape {format_shape(x.shape)}")
        inferred = total // known
        if inferred * known != total:
            raise ShapeError(f"reshape: shape {format_shape(x.shape)} cannot be viewed as {dims}")
        dims[holes[0]] = as_dim(inferred)
    return x.with_view(x.st.reshape(dims))


def view(x: Tensor, *shape: Dim | Sequence[Dim]) -> Tensor:
    return reshape(x, *shape)


def view_as(x: Tensor, other: Tensor) -> Tensor:
    return reshape(x, other.shape)


def reshape_as(x: Tensor, other: Tensor) -> Tensor:
    return reshape(x, other.shape)


def permute(x: Tensor, *dims: int | Sequence[int]) -> Tensor:
    order = _shape_arg(dims)
    if len(order) != x.ndim:
        raise ShapeError(f"permute: {order} does not name every axis of {format_shape(x.shape)}")
    return x.with_view(x.st.permute(order))


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    order = list(range(x.ndim))
    a, b = _axis(x, dim0, "transpose"), _axis(x, dim1, "transpose")
    order[a], order[b] = order[b], order[a]
    return x.with_view(x.st.permute(order))


swapaxes = swapdims = transpose


def t(x: Tensor) -> Tensor:
    if x.ndim > 2:
        raise ShapeError(f"t: expects at most 2 dims, got {format_shape(x.shape)}")
    return transpose(x, 0, 1) if x.ndim == 2 else x


def movedim(x: Tensor, source: int | Sequence[int], destination: int | Sequence[int]) -> Tensor:
    """torch.movedim: the named dims go to the new places; the others keep their order around them."""
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise ShapeError(f"movedim: {len(src)} source dims but {len(dst)} destinations")
    src, dst = [_axis(x, d, "movedim") for d in src], [_axis(x, d, "movedim") for d in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(f"movedim: repeated dim in {source} or {destination} for shape {format_shape(x.shape)}")
    order: list[int | None] = [None] * x.ndim
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(k for k in range(x.ndim) if k not in src)
    return x.with_view(x.st.permute([k if k is not None else next(rest) for k in order]))


moveaxis = movedim


def expand(x: Tensor, *shape: Dim | Sequence[Dim]) -> Tensor:
    """torch.expand: -1 keeps a dim; new leading dims may be added."""
    dims = _shape_arg(shape)
    if len(dims) < x.ndim:
        raise ShapeError(f"expand: {dims} has fewer dims than {format_shape(x.shape)}")
    lead = len(dims) - x.ndim
    full = [x.shape[k - lead] if isinstance(d, int) and d == -1 and k >= lead else d for k, d in enumerate(dims)]
    v = x.st.reshape((1,) * lead + tuple(x.st.shape)) if lead else x.st
    return x.with_view(v.expand(full))


def expand_as(x: Tensor, other: Tensor) -> Tensor:
    return expand(x, other.shape)


def broadcast_to(x: Tensor, shape: Sequence[Dim]) -> Tensor:
    return expand(x, list(shape))


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    d = _axis(x, dim, "unsqueeze", extra=1)
    shape = list(x.shape)
    shape.insert(d, 1)
    return x.with_view(x.st.reshape(shape))


def squeeze(x: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    if dim is None:
        dims = [k for k, d in enumerate(x.shape) if d == 1]
    else:
        dims = [_axis(x, d, "squeeze") for d in ([dim] if isinstance(dim, int) else dim)]
    shape = [d for k, d in enumerate(x.shape) if not (k in dims and d == 1)]
    return x.with_view(x.st.reshape(shape))


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if x.ndim == 0:
        return x.with_view(x.st.reshape((1,)))
    a, b = _axis(x, start_dim, "flatten"), _axis(x, end_dim, "flatten")
    if a > b:
        raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    shape = list(x.shape[:a]) + [as_dim(dims_product(x.shape[a : b + 1]))] + list(x.shape[b + 1 :])
    return x.with_view(x.st.reshape(shape))


def unflatten(x: Tensor, dim: int, sizes: Sequence[Dim]) -> Tensor:
    d = _axis(x, dim, "unflatten")
    sizes = list(sizes)
    if any(isinstance(s, int) and s == -1 for s in sizes):
        known = dims_product([s for s in sizes if not (isinstance(s, int) and s == -1)])
        sizes = [as_dim(as_expr(x.shape[d]) // known) if isinstance(s, int) and s == -1 else s for s in sizes]
    return reshape(x, list(x.shape[:d]) + sizes + list(x.shape[d + 1 :]))


# ---- slicing -------------------------------------------------------------------------------------------


def select(x: Tensor, dim: int, index: int) -> Tensor:
    """torch.select: the slice at `index` of `dim`, with that dim removed."""
    d = _axis(x, dim, "select")
    n, i = x.shape[d], int(index)
    if isinstance(n, int):
        if not -n <= i < n:
            raise IndexOutOfRange(f"select: index {i} is out of range for dim {d} of shape {format_shape(x.shape)}")
        y = _slice_axis(x, d, i % n, i % n + 1)
    else:
        # A symbolic size is unknown here, so pad the dim until the index surely lies within it; an index past
        # the run-time size then reads the padding (zero) instead of failing.
        lo = as_expr(n).lo
        if i >= 0:
            y = _slice_axis(_pad_axis(x, d, 0, max(0, i + 1 - lo)), d, i, i + 1)
        else:
            before = max(0, -i - lo)
            y = _slice_axis(_pad_axis(x, d, before, 0), d, as_expr(n) + i + before, as_expr(n) + i + before + 1)
    return y.with_view(y.st.reshape([s for k, s in enumerate(y.shape) if k != d]))


def _slice_bounds(n: Dim, key: slice) -> tuple[Dim, Dim, int]:
    """Python's slice clamping, also for symbolic sizes (where a start past the end gives an empty range)."""
    step = 1 if key.step is None else key.step
    if not isinstance(step, int) or step <= 0:
        raise ShapeError(f"getitem: slice step must be greater than zero, got {step} (use flip for a reversed view)")
    if isinstance(n, int) and all(v is None or isinstance(v, int) for v in (key.start, key.stop)):
        start, stop, _ = key.indices(n)
        return start, max(start, stop), step

    def bound(v: Any, default: Dim, clamp: bool) -> Expr:
        if v is None:
            return as_expr(default)
        e = as_expr(v)
        if e.lo >= 0:  # a start past the end needs no clamp: the range is then empty and reads nothing
            return e.min(n) if clamp and not provably_le(e, as_expr(n)) else e
        if e.hi < 0:
            return (as_expr(n) + e).max(0)
        return (e + (e < 0) * as_expr(n)).max(0).min(n)  # either sign: Python's rule as one expression

    start, stop = bound(key.start, 0, clamp=False), bound(key.stop, n, clamp=True)
    if provably_le(stop, start):
        return 0, 0, step  # empty for every size
    return as_dim(start), as_dim(stop), step


def narrow(x: Tensor, dim: int, start: Dim, length: Dim) -> Tensor:
    d = _axis(x, dim, "narrow")
    n = x.shape[d]
    if isinstance(n, int) and isinstance(start, int) and isinstance(length, int):
        if not -n <= start <= n or length < 0 or start % max(n, 1) + length > n:
            raise ShapeError(f"narrow: start {start}, length {length} do not fit dim {d} of {format_shape(x.shape)}")
        start = start % n if n else 0
    return _slice_axis(x, d, start, as_expr(start) + length)


def getitem(x: Tensor, key: Any) -> Tensor:
    """`x[key]` as torch does it: ints select, slices (positive steps) view, None adds a dim, ... fills the rest,
    and integer tensors or lists index one or more dims (gathered; luminal/hl/indexing.py)."""
    keys = list(key) if isinstance(key, tuple) else [key]
    if sum(k is Ellipsis for k in keys) > 1:
        raise ShapeError("getitem: an index can only have a single ellipsis ('...')")
    used = sum(not (k is None or k is Ellipsis or isinstance(k, bool)) for k in keys)
    if used > x.ndim:
        raise IndexOutOfRange(f"getitem: too many indices ({used}) for a tensor of shape {format_shape(x.shape)}")
    fill = [slice(None)] * (x.ndim - used)
    at = next((k for k, v in enumerate(keys) if v is Ellipsis), len(keys))
    keys = keys[:at] + fill + keys[at + 1 :]
    y, d, advanced = x, 0, []
    for k in keys:
        if k is None or isinstance(k, bool):
            y = unsqueeze(y, d)  # x[True] adds a dim of 1, x[False] one of 0 (as torch does)
            y = y if k is not False else _slice_axis(y, d, 0, 0)
            d += 1
        elif isinstance(k, (int, np.integer)):
            y = select(y, d, int(k))
        elif isinstance(k, slice):
            y = _slice_axis(y, d, *_slice_bounds(y.shape[d], k))
            d += 1
        elif isinstance(k, (Tensor, list, tuple, np.ndarray)):
            advanced.append((d, k))
            d += 1
        else:
            raise TypeError(f"getitem: cannot index with {type(k).__name__} {k!r}")
    if advanced:
        from luminal.hl import indexing

        dims = [a for a, _ in advanced]
        adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
        y = indexing.advanced_index(y, dims, [k for _, k in advanced], front=not adjacent)
    return y


# ---- rearranging ---------------------------------------------------------------------------------------


def flip(x: Tensor, *dims: int | Sequence[int]) -> Tensor:
    axes = _shape_arg(dims)
    return x.with_view(x.st.flip([_axis(x, a, "flip") for a in axes]))


def fliplr(x: Tensor) -> Tensor:
    if x.ndim < 2:
        raise ShapeError(f"fliplr: needs at least 2 dims, got {format_shape(x.shape)}")
    return flip(x, 1)


def flipud(x: Tensor) -> Tensor:
    if x.ndim < 1:
        raise ShapeError(f"flipud: needs at least 1 dim, got {format_shape(x.shape)}")
    return flip(x, 0)


def roll(x: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    """torch.roll: y[i] = x[(i - shift) mod n]; without dims, over the flattened tensor."""
    if dims is None:
        if not isinstance(shifts, int) and len(shifts) != 1:
            raise ShapeError(f"roll: without dims, shifts must be one int, got {shifts}")
        shift = shifts if isinstance(shifts, int) else shifts[0]
        return reshape(roll(flatten(x), shift, 0), x.shape)
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if len(shifts) != len(dims):
        raise ShapeError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    for s, dim in zip(shifts, dims):
        d = _axis(x, dim, "roll")
        n = x.shape[d]
        if isinstance(n, int):
            if n and s % n:  # two copies end to end, read from n - s: a view whose index is (i - s) mod n
                reps = [2 if k == d else 1 for k in range(x.ndim)]
                x = _slice_axis(x.with_view(_tile_view(x.st, reps)), d, n - s % n, 2 * n - s % n)
        else:
            from luminal.hl import indexing

            coords = [idx(k, m) for k, m in enumerate(x.shape)]
            coords[d] = (coords[d] - s) % n  # a symbolic n defeats the view's bounds proof, so gather instead
            x = indexing.gather_at(x, coords, x.shape)
    return x


def repeat(x: Tensor, *sizes: int | Sequence[int]) -> Tensor:
    """torch.Tensor.repeat: tile every dim (new leading dims allowed); a view reading index i % n. A count
    may be a symbol (tiled by the batch size, as ONNX exports write Tile)."""
    reps = _shape_arg(sizes)
    if len(reps) < x.ndim or any(not isinstance(r, (int, Expr)) or as_expr(r).lo < 0 for r in reps):
        raise ShapeError(f"repeat: {reps} must be non-negative ints, at least one per dim of {format_shape(x.shape)}")
    lead = len(reps) - x.ndim
    st = x.st.reshape((1,) * lead + tuple(x.shape)) if lead else x.st
    return x.with_view(_tile_view(st, reps))


def tile(x: Tensor, dims: Sequence[int]) -> Tensor:
    """torch.tile: like repeat, with missing leading repeats taken as 1."""
    dims = list(dims)
    return repeat(x, [1] * (x.ndim - len(dims)) + dims)


def repeat_interleave(x: Tensor, repeats: int, dim: int | None = None, *, output_size: int | None = None) -> Tensor:
    """Each element repeated `repeats` times in place: (n,) -> (n, 1) -> (n, r) -> (n * r,), reading i // r."""
    if isinstance(repeats, Tensor) or not isinstance(repeats, int) or repeats < 0:
        raise ShapeError(f"repeat_interleave: repeats must be a non-negative int, got {repeats!r}")
    if dim is None:
        x, dim = flatten(x), 0
    d = _axis(x, dim, "repeat_interleave")
    wide = list(x.shape[: d + 1]) + [1] + list(x.shape[d + 1 :])
    spread = list(x.shape[: d + 1]) + [repeats] + list(x.shape[d + 1 :])
    merged = list(x.shape[:d]) + [as_dim(as_expr(x.shape[d]) * repeats)] + list(x.shape[d + 1 :])
    return x.with_view(x.st.reshape(wide).expand(spread).reshape(merged))


def unbind(x: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    d = _axis(x, dim, "unbind")
    return tuple(select(x, d, i) for i in range(_concrete(x, d, "unbind")))


METHODS = (
    "reshape",
    "view",
    "view_as",
    "reshape_as",
    "permute",
    "transpose",
    "swapaxes",
    "swapdims",
    "t",
    "movedim",
    "moveaxis",
    "expand",
    "expand_as",
    "broadcast_to",
    "unsqueeze",
    "squeeze",
    "flatten",
    "unflatten",
    "select",
    "narrow",
    "flip",
    "fliplr",
    "flipud",
    "roll",
    "repeat",
    "tile",
    "repeat_interleave",
    "unbind",
)
DUNDERS = {"__getitem__": "getitem"}

__all__ = list(METHODS)
