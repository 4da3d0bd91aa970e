"""Joining and splitting tensors: cat is a sum of zero-padded views, splits are slices (views), and F.pad,
whose non-constant modes are concatenations of slices."""

from __future__ import annotations

from typing import Sequence

from luminal import dtypes as dt
from luminal.hl import movement as M
from luminal.hl import prim
from luminal.symbolic import Dim, as_dim, as_expr
from luminal.tensor import Tensor
from luminal.view import ShapeError, format_shape


def _shapes(tensors: Sequence[Tensor]) -> str:
    return ", ".join(format_shape(t.shape) for t in tensors)


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """torch.cat: each input is padded with zeros to the full length of `dim` at its offset, and the padded
    views are added (x + 0 = x exactly, for inf and nan too; for bool, add is or). Dtypes promote as in torch."""
    tensors = list(tensors)
    if not tensors or not all(isinstance(t, Tensor) for t in tensors):
        raise ShapeError("cat: expects a non-empty sequence of tensors")
    # torch still accepts (and skips) 1-d empty tensors beside tensors of any rank
    kept = [t for t in tensors if not (t.shape == (0,) and any(u.ndim != 1 for u in tensors))] or tensors[:1]
    ref = kept[0]
    if ref.ndim == 0:
        raise ShapeError(f"cat: zero-dimensional tensors cannot be concatenated (shapes {_shapes(tensors)})")
    d = M._axis(ref, dim, "cat")
    for t in kept:
        if t.ndim != ref.ndim or any(a != b for k, (a, b) in enumerate(zip(t.shape, ref.shape)) if k != d):
            raise ShapeError(f"cat: shapes {_shapes(tensors)} differ outside dim {dim}")
    dtype = kept[0].dtype
    for t in kept[1:]:
        dtype = dt.promote(dtype, t.dtype)
    total = sum((as_expr(t.shape[d]) for t in kept), as_expr(0))
    out, offset = None, as_expr(0)
    for t in kept:
        placed = M._pad_axis(prim.cast(t, dtype), d, as_dim(offset), as_dim(total - offset - t.shape[d]))
        out = placed if out is None else prim.add(out, placed)
        offset = offset + t.shape[d]
    return out


concat = concatenate = cat


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """torch.stack: every input gets a new dim of 1 at `dim`, then they are concatenated along it."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("stack: expects a non-empty sequence of tensors")
    if any(t.shape != tensors[0].shape for t in tensors):
        raise ShapeError(f"stack: expects tensors of one shape, got {_shapes(tensors)}")
    d = M._axis(tensors[0], dim, "stack", extra=1)
    return cat([M.unsqueeze(t, d) for t in tensors], d)


def _at_least(t: Tensor, rank: int) -> Tensor:
    """torch.atleast_1d/2d/3d: a scalar becomes all ones, (n,) becomes (1, n) or (1, n, 1), (a, b) (a, b, 1)."""
    if t.ndim >= rank:
        return t
    if t.ndim == 0:
        return M.reshape(t, [1] * rank)
    if rank == 2:
        return M.reshape(t, [1, *t.shape])
    return M.reshape(t, [1, *t.shape, 1] if t.ndim == 1 else [*t.shape, 1])


def hstack(tensors: Sequence[Tensor]) -> Tensor:
    tensors = [_at_least(t, 1) for t in tensors]
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors: Sequence[Tensor]) -> Tensor:
    return cat([_at_least(t, 2) for t in tensors], 0)


def dstack(tensors: Sequence[Tensor]) -> Tensor:
    return cat([_at_least(t, 3) for t in tensors], 2)


def split(x: Tensor, split_size_or_sections: int | Sequence[Dim], dim: int = 0) -> tuple[Tensor, ...]:
    """torch.split: chunks of one size (the last may be smaller), or of the listed sizes; all views."""
    d = M._axis(x, dim, "split")
    n = x.shape[d]
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        n = M._concrete(x, d, "split")
        if size < 0 or (size == 0 and n):
            raise ShapeError(f"split: split size {size} does not divide dim {d} of {format_shape(x.shape)}")
        sizes = [min(size, n - s) for s in range(0, n, size)] if n else [0]
    else:
        sizes = list(split_size_or_sections)
        if as_expr(sum((as_expr(s) for s in sizes), as_expr(0))) != as_expr(n):
            raise ShapeError(f"split: sizes {sizes} do not add up to dim {d} of {format_shape(x.shape)}")
    out, start = [], as_expr(0)
    for s in sizes:
        out.append(M._slice_axis(x, d, as_dim(start), as_dim(start + s)))
        start = start + s
    return tuple(out)


def chunk(x: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """torch.chunk: pieces of ceil(n / chunks) (so possibly fewer than `chunks` pieces)."""
    if not isinstance(chunks, int) or chunks <= 0:
        raise ShapeError(f"chunk: chunks must be a positive int, got {chunks!r}")
    d = M._axis(x, dim, "chunk")
    n = M._concrete(x, d, "chunk")
    if n == 0:
        return tuple(x for _ in range(chunks))
    return split(x, -(-n // chunks), d)


def tensor_split(x: Tensor, indices_or_sections: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """torch.tensor_split: n sections (the first n % sections one longer) or cuts at the given indices."""
    d = M._axis(x, dim, "tensor_split")
    n = M._concrete(x, d, "tensor_split")
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        if k <= 0:
            raise ShapeError(f"tensor_split: sections must be positive, got {k}")
        cuts = [i * (n // k) + min(i, n % k) for i in range(1, k)]
    else:
        cuts = list(indices_or_sections)
    bounds = [0] + [min(max(c if c >= 0 else c + n, 0), n) for c in cuts] + [n]
    return tuple(M._slice_axis(x, d, a, max(a, b)) for a, b in zip(bounds, bounds[1:]))


# ---- padding -------------------------------------------------------------------------------------------


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """F.pad: `pad` holds (before, after) pairs from the last dim backwards. Constant padding is a view (a
    negative width crops); reflect and replicate concatenate slices; circular is a view of three tiled copies."""
    pad = list(pad)
    if len(pad) % 2 or len(pad) > 2 * x.ndim:
        raise ShapeError(f"pad: {len(pad)} widths do not form (before, after) pairs for {format_shape(x.shape)}")
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise ValueError(f"pad: unknown mode {mode!r}; use constant, reflect, replicate or circular")
    if mode != "constant" and value:
        raise ValueError(f"pad: a fill value only applies to mode 'constant', not {mode!r}")
    for j in range(len(pad) // 2):
        d, (before, after) = x.ndim - 1 - j, pad[2 * j : 2 * j + 2]
        if mode == "constant":
            x = _pad_constant(x, d, before, after, value or 0)
            continue
        if before < 0 or after < 0:
            raise ShapeError(f"pad: mode {mode!r} needs non-negative widths, got {pad}")
        n = x.shape[d]
        if mode == "circular":
            if before > n or after > n:  # type: ignore[operator]
                raise ShapeError(f"pad: circular widths {pad} exceed dim {d} of {format_shape(x.shape)}")
            reps = [3 if k == d else 1 for k in range(x.ndim)]
            x = M._slice_axis(x.with_view(M._tile_view(x.st, reps)), d, as_expr(n) - before, 2 * as_expr(n) + after)
            continue
        if mode == "reflect":
            if before >= n or after >= n:  # type: ignore[operator]
                raise ShapeError(f"pad: reflect widths {pad} must be below dim {d} of {format_shape(x.shape)}")
            left = M.flip(M._slice_axis(x, d, 1, before + 1), d)
            right = M.flip(M._slice_axis(x, d, as_expr(n) - 1 - after, as_expr(n) - 1), d)
        else:  # replicate: the edge element, expanded
            left = _expand_axis(M._slice_axis(x, d, 0, 1), d, before)
            right = _expand_axis(M._slice_axis(x, d, as_expr(n) - 1, n), d, after)
        x = cat([left, x, right], d)
    return x


def _expand_axis(x: Tensor, d: int, size: int) -> Tensor:
    return x.with_view(x.st.expand([size if k == d else s for k, s in enumerate(x.shape)]))


def _pad_constant(x: Tensor, d: int, before: int, after: int, value: float) -> Tensor:
    n = as_expr(x.shape[d])
    x = M._slice_axis(x, d, max(-before, 0), n - max(-after, 0))  # negative widths crop
    before, after, n = max(before, 0), max(after, 0), as_expr(x.shape[d])
    if not before and not after:
        return x
    y = M._pad_axis(x, d, before, after)  # padding reads as zero
    if value == 0:
        return y
    # value + 0 is exact for every value (inf and nan too), so the fill is added as slabs that are zero inside.
    for start, size in ((0, before), (before + n, after)):
        if size:
            slab = prim.scalar(x.graph, value, x.dtype, [size if k == d else s for k, s in enumerate(y.shape)])
            y = prim.add(y, M._pad_axis(slab, d, start, as_expr(y.shape[d]) - start - size))
    return y


METHODS = ("split", "chunk", "tensor_split")

__all__ = list(METHODS) + ["pad", "cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack"]
