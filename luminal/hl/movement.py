"""Movement ops: every one changes the view only (see luminal/view.py), never the data."""

from __future__ import annotations

from typing import Sequence

from luminal.symbolic import Dim, as_dim, as_expr
from luminal.tensor import Tensor
from luminal.view import ShapeError, dims_product, format_shape


def _axis(x: Tensor, d: int, op: str, extra: int = 0) -> int:
    rank = x.ndim + extra
    if not isinstance(d, int) or not -max(rank, 1) <= d < max(rank, 1):
        raise ShapeError(f"{op}: dim {d} is out of range for shape {format_shape(x.shape)}")
    return d % max(rank, 1)


def _shape_arg(shape) -> list:
    return list(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else list(shape)


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


def t(x: Tensor) -> Tensor:
    if x.ndim > 2:
        raise ShapeError(f"t: expects at most 2 dims, got {format_shape(x.shape)}")
    return transpose(x, 0, 1) if x.ndim == 2 else x


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


METHODS = (
    "reshape",
    "view",
    "permute",
    "transpose",
    "t",
    "expand",
    "expand_as",
    "unsqueeze",
    "squeeze",
    "flatten",
    "unflatten",
)

__all__ = list(METHODS)
