"""Matrix products. Every one is expand + multiply + sum-reduce over the contracted axis, laid out last.

That one shape, `a[..., m, 1, k] * b[..., 1, n, k]` (both expanded to `[..., m, n, k]`) summed over the last
axis, is what the compiler recognises as a GEMM; mm, bmm, linear, einsum and convolutions all lower to it, so
no backend ever sees a matmul op.
"""

from __future__ import annotations

from typing import Any, Sequence

from luminal import dtypes as dt
from luminal.hl import prim
from luminal.symbolic import Dim, as_dim
from luminal.tensor import Tensor
from luminal.view import ShapeError, dims_product, format_shape


def _contract(a: Tensor, b: Tensor) -> Tensor:
    """The GEMM pattern: a[..., m, k] @ b[..., k, n] for equal batch dims and one dtype."""
    *batch, m, k = a.shape
    n = b.shape[-1]
    full = (*batch, m, n, k)
    rows = a.st.reshape((*batch, m, 1, k)).expand(full)  # a[..., m, 1, k], repeated n times
    order = [*range(len(batch)), len(batch) + 1, len(batch)]
    cols = b.st.permute(order).reshape((*batch, 1, n, k)).expand(full)  # b transposed: k becomes the last axis
    return prim.sum_reduce(prim.mul(a.with_view(rows), b.with_view(cols)), len(full) - 1)  # sum_k a[m,k] b[k,n]


def _widen(*xs: Tensor) -> tuple[list[Tensor], dt.DType]:
    """Half-precision operands multiply in float32 (exact products, float32 sums, one rounding at the end), as
    PyTorch's kernels and tensor-core GEMMs do; rounding every product to half would not. Returns the out dtype."""
    half = xs[0].dtype in (dt.float16, dt.bfloat16)
    return [prim.cast(x, dt.float32) for x in xs] if half else list(xs), xs[0].dtype


def _check_dtypes(op: str, *xs: Tensor) -> None:
    # PyTorch multiplies matrices of one dtype only, and never bool.
    if any(x.dtype != xs[0].dtype for x in xs):
        names = " and ".join(x.dtype.name for x in xs)
        raise dt.DTypeError(f"{op}: expected operands of one dtype, got {names}")
    if xs[0].dtype == dt.bool_:
        raise dt.DTypeError(f"{op}: not defined for bool tensors")


def _reshape(x: Tensor, shape: Sequence[Dim]) -> Tensor:
    return x.with_view(x.st.reshape(shape))


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """torch.matmul: 1-D operands gain (then lose) a unit dim; batch dims broadcast."""
    if a.ndim == 0 or b.ndim == 0:
        shown = f"{format_shape(a.shape)} and {format_shape(b.shape)}"
        raise ShapeError(f"matmul: both operands need at least 1 dim, got {shown}")
    _check_dtypes("matmul", a, b)
    (a2, b2), out_dtype = _widen(a, b)
    a2 = _reshape(a2, (1, *a.shape)) if a.ndim == 1 else a2  # a vector is a [1, k] row
    b2 = _reshape(b2, (*b.shape, 1)) if b.ndim == 1 else b2  # ... or a [k, 1] column
    if a2.shape[-1] != b2.shape[-2]:
        raise ShapeError(
            f"matmul: shapes {format_shape(a.shape)} and {format_shape(b.shape)} cannot be multiplied "
            f"({a2.shape[-1]} != {b2.shape[-2]})"
        )
    batch = prim.broadcast_shapes(a2.shape[:-2], b2.shape[:-2], op="matmul")
    out = _contract(prim.broadcast_to(a2, (*batch, *a2.shape[-2:])), prim.broadcast_to(b2, (*batch, *b2.shape[-2:])))
    shape = list(out.shape)
    if b.ndim == 1:
        shape.pop(-1)
    if a.ndim == 1:
        shape.pop(-2 if b.ndim > 1 else -1)
    return prim.cast(_reshape(out, shape), out_dtype)


def _rmatmul(b: Tensor, a: Any) -> Tensor:
    return matmul(a, b)


def _require_ndim(op: str, want: int, *xs: Tensor) -> None:
    if any(x.ndim != want for x in xs):
        shown = " and ".join(format_shape(x.shape) for x in xs)
        raise ShapeError(f"{op}: expects {want}-D operands, got {shown}")


def mm(a: Tensor, b: Tensor) -> Tensor:
    _require_ndim("mm", 2, a, b)
    return matmul(a, b)


def bmm(a: Tensor, b: Tensor) -> Tensor:
    _require_ndim("bmm", 3, a, b)
    if a.shape[0] != b.shape[0]:
        raise ShapeError(f"bmm: batch sizes differ: {format_shape(a.shape)} and {format_shape(b.shape)}")
    return matmul(a, b)


def mv(a: Tensor, v: Tensor) -> Tensor:
    _require_ndim("mv", 2, a)
    _require_ndim("mv", 1, v)
    return matmul(a, v)


def dot(a: Tensor, b: Tensor) -> Tensor:
    _require_ndim("dot", 1, a, b)
    if a.shape != b.shape:
        raise ShapeError(f"dot: lengths differ: {format_shape(a.shape)} and {format_shape(b.shape)}")
    return matmul(a, b)


def outer(a: Tensor, b: Tensor) -> Tensor:
    from luminal.hl import elementwise as E

    _require_ndim("outer", 1, a, b)
    return E.mul(_reshape(a, (a.shape[0], 1)), b)  # outer(a, b)[i, j] = a[i] * b[j]


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """F.linear: y = x @ weight.T + bias, with weight [out, in] (or [in] for a single output)."""
    from luminal.hl import elementwise as E

    w = weight.with_view(weight.st.permute([1, 0])) if weight.ndim == 2 else weight
    if weight.ndim not in (1, 2):
        raise ShapeError(f"linear: weight must be 1-D or 2-D, got {format_shape(weight.shape)}")
    y = matmul(x, w)
    return y if bias is None else E.add(y, bias)


def _scaled_sum(base: Tensor, product: Tensor, beta: Any, alpha: Any) -> Tensor:
    """beta * base + alpha * product; with beta == 0 `base` is ignored, so its nan/inf do not leak (torch)."""
    from luminal.hl import elementwise as E

    prim.broadcast_shapes(base.shape, product.shape, op="addmm")  # base must broadcast to the product's shape
    scaled = product if alpha == 1 else E.mul(product, alpha)
    if beta == 0:
        return scaled
    return E.add(base if beta == 1 else E.mul(base, beta), scaled)


def addmm(x: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return _scaled_sum(x, mm(mat1, mat2), beta, alpha)  # beta x + alpha (mat1 @ mat2)


def baddbmm(x: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return _scaled_sum(x, bmm(batch1, batch2), beta, alpha)  # beta x + alpha (b1 @ b2)


# ---- einsum ----------------------------------------------------------------------------------------


def _subscripts(term: str, ndim: int | None, ellipsis_rank: int) -> list[str]:
    """One term's labels (ndim None: the output); dims under '...' get labels '...0', '...1', right-aligned."""
    letters = term.replace("...", "")
    if not all(c.isalpha() for c in letters) or term.count("...") > 1:
        raise ValueError(f"einsum: invalid subscripts {term!r}")
    if "..." not in term:
        if ndim is not None and len(term) != ndim:
            raise ShapeError(f"einsum: subscripts {term!r} name {len(term)} dims, but the operand has {ndim}")
        return list(term)
    covered = ellipsis_rank if ndim is None else ndim - len(letters)
    if covered < 0:
        raise ShapeError(f"einsum: subscripts {term!r} name more dims than the operand's {ndim}")
    head, tail = term.split("...")
    return [*head, *(f"...{k}" for k in range(ellipsis_rank - covered, ellipsis_rank)), *tail]


def _diagonal(x: Tensor, labs: list[str]) -> tuple[Tensor, list[str]]:
    """x with each subscript repeated within it ('ii') reduced to its diagonal, that label once, last."""
    from luminal.hl import combine

    while len(set(labs)) != len(labs):
        lab = next(lab for lab in labs if labs.count(lab) > 1)
        i, j = [k for k, other in enumerate(labs) if other == lab][:2]
        n = x.shape[i]
        if x.shape[j] != n:
            raise ShapeError(f"einsum: subscript {lab!r} repeats over dims of sizes {n} and {x.shape[j]}")
        rest = [k for k in range(x.ndim) if k not in (i, j)]
        batch = [x.shape[k] for k in rest]
        # [..., n, n] flattened and padded by n to [..., n, n + 1]: column 0 holds x[..., a, a]
        square = x.permute(*rest, i, j).reshape(*batch, as_dim(n * n))
        x = combine.pad(square, (0, n)).reshape(*batch, n, as_dim(n + 1))[..., 0]
        labs = [labs[k] for k in rest] + [lab]
    return x, labs


def einsum(equation: str, *operands: Tensor | Sequence[Tensor]) -> Tensor:
    """torch.einsum over any number of operands; a subscript repeated within one operand takes its diagonal.

    Each operand is permuted, given unit dims for the labels it lacks and expanded to [out labels...,
    contracted labels...]; the product is summed over the contracted labels, merged into one last axis.
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands) or not operands:
        raise ValueError(f"einsum: {equation!r} names {len(terms)} operands, {len(operands)} given")
    ell = max((x.ndim - len(t.replace("...", "")) for t, x in zip(terms, operands) if "..." in t), default=0)
    labels = [_subscripts(t, x.ndim, ell) for t, x in zip(terms, operands)]
    written = [lab for labs in labels for lab in labs]  # as the equation spells them: 'ii' alone is a trace
    operands, labels = zip(*(_diagonal(x, labs) for x, labs in zip(operands, labels)))
    sizes: dict[str, Dim] = {}
    for x, labs in zip(operands, labels):
        for lab, d in zip(labs, x.shape):
            have = sizes.get(lab, 1)
            if d != 1 and have != 1 and d != have:
                raise ShapeError(f"einsum: subscript {lab!r} is {have} in one operand and {d} in another")
            sizes[lab] = d if have == 1 else have
    _check_dtypes("einsum", *operands)
    operands, out_dtype = _widen(*operands)
    seen = [lab for labs in labels for lab in labs]
    if arrow:
        out = _subscripts(rhs, None, ell)
        if len(set(out)) != len(out) or any(lab not in sizes for lab in out):
            raise ValueError(f"einsum: output subscripts {rhs!r} must be distinct and appear in an input")
    else:  # implicit output: the ellipsis, then the labels used once, in alphabetical order
        out = [f"...{k}" for k in range(ell)] + sorted(
            lab for lab in sizes if not lab.startswith("...") and written.count(lab) == 1
        )
    summed = [lab for lab in dict.fromkeys(seen) if lab not in out]
    order = out + summed
    full = [sizes[lab] for lab in order]
    product = None
    for x, labs in zip(operands, labels):
        present = sorted(labs, key=order.index)
        v = x.st.permute([labs.index(lab) for lab in present])
        v = v.reshape([x.shape[labs.index(lab)] if lab in labs else 1 for lab in order]).expand(full)
        term = x.with_view(v)
        product = term if product is None else prim.mul(product, term)
    if summed:
        if len(summed) > 1:  # one contracted axis, last: the GEMM pattern
            product = _reshape(product, [*full[: len(out)], as_dim(dims_product(full[len(out) :]))])
        product = prim.sum_reduce(product, len(out))
    return prim.cast(product, out_dtype)


METHODS = ("matmul", "mm", "bmm", "mv", "dot", "outer", "addmm", "baddbmm")
DUNDERS = {"__matmul__": "matmul", "__rmatmul__": "_rmatmul"}

__all__ = [*METHODS, "linear", "einsum"]
