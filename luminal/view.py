"""Views (the ShapeTracker): how a tensor's logical elements map onto a contiguous buffer.

A view is a logical shape plus two symbolic expressions over the logical indices `_i0 .. _i{n-1}`:
`index` (the element's position in the flat buffer) and `valid` (0 where the element is padding, which
reads as zero). Every movement op substitutes new indices into those expressions, so any chain of
permute / reshape / expand / slice / pad / flip stays a view, never a copy: a reshape of a
non-contiguous view becomes div/mod arithmetic, simplified away again when the layout allows.

The view also remembers the movement ops that built it from its buffer's shape. That history is what the
graph file stores: replaying it through these checked methods is the only way to build a view from a
file, so a hostile file cannot describe a view that reads outside its buffer.
"""

from __future__ import annotations

import operator
from typing import Any, Sequence

from luminal.symbolic import Dim, Expr, SymbolicError, as_dim, as_expr, const, var
from luminal.symbolic import simplify as S
from luminal.symbolic.expr import expr_from_json


class ShapeError(ValueError):
    """A shape does not fit an operation; the message names the operation and the shapes."""


def idx(k: int, dim: Dim) -> Expr:
    """The logical index variable of axis `k` of a dimension `dim` (ranges over [0, dim))."""
    d = as_expr(dim)
    return var(f"_i{k}", 0, max(d.hi - 1, 0))


def dims_product(shape: Sequence[Dim]) -> Expr:
    out = const(1)
    for d in shape:
        out = out * d
    return out


def contiguous_strides(shape: Sequence[Dim]) -> list[Expr]:
    strides, acc = [], const(1)
    for d in reversed(shape):
        strides.append(acc)
        acc = acc * d
    return strides[::-1]


def format_shape(shape: Sequence[Dim]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


class ShapeTracker:
    """An immutable view; every method returns a new one."""

    __slots__ = ("base", "shape", "index", "valid", "history")

    def __init__(self, base: tuple, shape: tuple, index: Expr, valid: Expr, history: tuple):
        self.base = base
        self.shape = shape
        self.index = index
        self.valid = valid
        self.history = history

    @classmethod
    def contiguous(cls, shape: Sequence[Dim]) -> ShapeTracker:
        shape = tuple(as_dim(d) for d in shape)
        for d in shape:
            if as_expr(d).lo < 0:
                raise ShapeError(f"dimension {d} of shape {format_shape(shape)} can be negative")
        index = const(0)
        for k, (d, s) in enumerate(zip(shape, contiguous_strides(shape))):
            index = index + idx(k, d) * s
        return cls(shape, shape, index, const(1), ())

    # ---- queries -------------------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> Expr:
        return dims_product(self.shape)

    def is_contiguous(self) -> bool:
        """True when the view reads its whole buffer in order (no copy needed to use it flat)."""
        return (
            self.valid == 1
            and self.index == ShapeTracker.contiguous(self.shape).index
            and (dims_product(self.shape) == dims_product(self.base))
        )

    def is_identity(self) -> bool:
        """True when the view reads its buffer as it is: every element, in order, in the buffer's own shape."""
        return bool(self.is_contiguous()) and tuple(self.base) == tuple(self.shape)

    def strides(self) -> tuple[list[Expr], Expr] | None:
        """(strides, offset) when the view is a plain strided view without padding, else None."""
        if self.valid != 1:
            return None
        zero = {f"_i{k}": 0 for k in range(self.ndim)}
        offset = self.index.substitute(zero)
        strides = [self.index.substitute({**zero, f"_i{k}": 1}) - offset for k in range(self.ndim)]
        rebuilt = offset
        for k, (d, s) in enumerate(zip(self.shape, strides)):
            rebuilt = rebuilt + idx(k, d) * s
        return (strides, offset) if rebuilt == self.index else None

    def __repr__(self) -> str:
        return f"View{format_shape(self.shape)}[index={self.index}, valid={self.valid}]"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ShapeTracker):
            return NotImplemented
        return (self.base, self.shape, self.index, self.valid) == (other.base, other.shape, other.index, other.valid)

    def __hash__(self) -> int:
        return hash((self.base, self.shape, self.index, self.valid))

    # ---- movement ------------------------------------------------------------------------------------
    def _remap(self, shape: tuple, old_of_new: list[Expr], valid: Expr, step: tuple) -> ShapeTracker:
        table = {f"_i{k}": e for k, e in enumerate(old_of_new)}
        shape = tuple(as_dim(d) for d in shape)
        return ShapeTracker(
            self.base,
            shape,
            _within_dims(self.index.substitute(table), shape),
            _within_dims(self.valid.substitute(table) & valid, shape),
            self.history + (step,),
        )

    def _axis(self, axis: int, op: str) -> int:
        try:
            axis = operator.index(axis)  # ints and numpy integers, not floats or bools-as-strings
        except TypeError:
            raise ShapeError(f"{op}: axis {axis!r} is not an integer") from None
        if not -self.ndim <= axis < max(self.ndim, 1):
            raise ShapeError(f"{op}: axis {axis} is out of range for shape {format_shape(self.shape)}")
        return axis % max(self.ndim, 1)

    def permute(self, order: Sequence[int]) -> ShapeTracker:
        order = [self._axis(a, "permute") for a in order]
        if sorted(order) != list(range(self.ndim)):
            raise ShapeError(f"permute: {list(order)} is not a permutation of the axes of {format_shape(self.shape)}")
        new_shape = tuple(self.shape[a] for a in order)
        old = [const(0)] * self.ndim
        for new_k, old_k in enumerate(order):
            old[old_k] = idx(new_k, new_shape[new_k])
        return self._remap(new_shape, old, const(1), ("permute", list(order)))

    def reshape(self, new_shape: Sequence[Dim]) -> ShapeTracker:
        new_shape = tuple(as_dim(d) for d in new_shape)
        if any(as_expr(d).lo < 0 for d in new_shape):
            raise ShapeError(f"reshape: {format_shape(new_shape)} has a negative dimension")
        if dims_product(new_shape) != self.numel():
            raise ShapeError(
                f"reshape: cannot view shape {format_shape(self.shape)} ({self.numel()} elements) "
                f"as {format_shape(new_shape)} ({dims_product(new_shape)} elements)"
            )
        if new_shape == self.shape:
            return self
        old = _regrouped(self.shape, new_shape)
        if old is None:
            old = _unflatten(self.shape, new_shape, range(len(self.shape)), range(len(new_shape)))
        return self._remap(new_shape, old, const(1), ("reshape", [as_expr(d).to_json() for d in new_shape]))

    def expand(self, new_shape: Sequence[Dim]) -> ShapeTracker:
        new_shape = tuple(as_dim(d) for d in new_shape)
        if len(new_shape) != self.ndim:
            raise ShapeError(f"expand: cannot expand {format_shape(self.shape)} to {format_shape(new_shape)}")
        old = []
        for k, (have, want) in enumerate(zip(self.shape, new_shape)):
            if have == want:
                old.append(idx(k, want))
            elif have == 1:
                old.append(const(0))  # a broadcast axis reads the same element for every index
            else:
                raise ShapeError(
                    f"expand: dimension {k} of {format_shape(self.shape)} is {have}, not 1, "
                    f"so it cannot expand to {format_shape(new_shape)}"
                )
        return self._remap(new_shape, old, const(1), ("expand", [as_expr(d).to_json() for d in new_shape]))

    def slice(self, bounds: Sequence[tuple[Dim, Dim, int]]) -> ShapeTracker:
        """Per axis (start, stop, step) with 0 <= start <= stop <= dim and step >= 1."""
        if len(bounds) != self.ndim:
            raise ShapeError(f"slice: {len(bounds)} ranges given for shape {format_shape(self.shape)}")
        new_shape, old = [], []
        for k, ((start, stop, step), d) in enumerate(zip(bounds, self.shape)):
            start, stop = as_expr(start), as_expr(stop)
            if not isinstance(step, int) or step < 1:
                raise ShapeError(f"slice: step {step} on axis {k} must be a positive int")
            # A symbolic range may be empty for some sizes (x[2:] when n = 1); it then has no elements to read.
            empty_possible = (stop - start).lo < 0 and not (stop - start).is_const
            if (
                start.lo < 0
                or (stop - start).hi < 0
                or not provably_le(stop, as_expr(d))
                or ((stop - start).lo < 0 and not empty_possible)
            ):
                raise ShapeError(f"slice: range [{start}, {stop}) on axis {k} is outside {format_shape(self.shape)}")
            size = (stop - start + (step - 1)) // step
            if empty_possible:
                size = size.max(0)
            new_shape.append(size)
            old.append(start + idx(k, size) * step)
        step_json = [[as_expr(a).to_json(), as_expr(b).to_json(), s] for a, b, s in bounds]
        return self._remap(tuple(new_shape), old, const(1), ("slice", step_json))

    def pad(self, widths: Sequence[tuple[Dim, Dim]]) -> ShapeTracker:
        """Per axis (before, after) zero padding; padded elements read as zero."""
        if len(widths) != self.ndim:
            raise ShapeError(f"pad: {len(widths)} widths given for shape {format_shape(self.shape)}")
        new_shape, old, valid = [], [], const(1)
        for k, ((before, after), d) in enumerate(zip(widths, self.shape)):
            before, after = as_expr(before), as_expr(after)
            if before.lo < 0 or after.lo < 0:
                raise ShapeError(f"pad: widths ({before}, {after}) on axis {k} must not be negative")
            size = before + d + after
            j = idx(k, size)
            new_shape.append(size)
            old.append(j - before)
            valid = valid & (j >= before) & (j < before + d)
        return self._remap(
            tuple(new_shape), old, valid, ("pad", [[as_expr(a).to_json(), as_expr(b).to_json()] for a, b in widths])
        )

    def flip(self, axes: Sequence[int]) -> ShapeTracker:
        axes = {self._axis(a, "flip") for a in axes}
        old = [(d - 1 - idx(k, d)) if k in axes else idx(k, d) for k, d in enumerate(self.shape)]
        return self._remap(self.shape, old, const(1), ("flip", sorted(axes)))

    def then(self, outer: ShapeTracker) -> ShapeTracker:
        """The view that reads through `self` and then through `outer` (whose base is this view's shape)."""
        if tuple(outer.base) != tuple(self.shape):
            raise ShapeError(f"cannot compose a view over {format_shape(outer.base)} after {format_shape(self.shape)}")
        st = self
        for name, arg in outer.history:
            st = _REPLAY[name](st, arg)
        return st

    # ---- serialisation -------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"base": [as_expr(d).to_json() for d in self.base], "ops": [list(s) for s in self.history]}

    @classmethod
    def from_json(cls, data: Any) -> ShapeTracker:
        """Rebuild a view by replaying its movement ops (each one checked) on its buffer's shape."""
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("base"), list)
            or not isinstance(data.get("ops"), list)
        ):
            raise ShapeError("a view must be {'base': [...], 'ops': [...]}")
        if len(data["ops"]) > 256 or len(data["base"]) > 16:
            raise ShapeError("a view has more than 256 movement ops or 16 dimensions")
        try:
            st = cls.contiguous([expr_from_json(d) for d in data["base"]])
            for step in data["ops"]:
                if not isinstance(step, list) or len(step) != 2 or step[0] not in _REPLAY:
                    raise ShapeError(f"unknown movement op {step!r:.80}")
                st = _REPLAY[step[0]](st, step[1])
        except (SymbolicError, TypeError, ValueError) as e:
            raise ShapeError(f"invalid view: {e}") from e
        return st


def provably_le(a: Expr, b: Expr) -> bool:
    """True when a <= b for every value of the symbols. Bounds alone cannot see that min(3, n) <= n (the
    difference n - min(3, n) has a negative lower bound), so min and max are taken apart first."""
    if (b - a).lo >= 0:
        return True
    if b.op == "min":
        return all(provably_le(a, t) for t in b.args)
    if a.op == "max":
        return all(provably_le(t, b) for t in a.args)
    if b.op == "max":
        return any(provably_le(a, t) for t in b.args)
    if a.op == "min":
        return any(provably_le(t, b) for t in a.args)
    return False


def _within_dims(e: Expr, shape: tuple) -> Expr:
    """Use what intervals cannot see: index `_ik` is below its symbolic dim, so `_ik % d_k = _ik`, `_ik // d_k = 0`."""
    symbolic = {f"_i{k}": as_expr(d) for k, d in enumerate(shape) if not as_expr(d).is_const}
    if not symbolic:
        return e
    cache: dict[int, Expr] = {}

    def walk(x: Expr) -> Expr:
        if x.op in ("const", "var"):
            return x
        got = cache.get(id(x))
        if got is not None:
            return got
        args = [walk(a) for a in x.args]
        if x.op in ("mod", "div") and args[0].op == "var" and symbolic.get(args[0].args[0]) == args[1]:
            out = args[0] if x.op == "mod" else const(0)
        else:
            out = S.build(x.op, args) if any(a is not b for a, b in zip(args, x.args)) else x
        cache[id(x)] = out
        return out

    return walk(e)


def _exprs(items: Any) -> list[Expr]:
    if not isinstance(items, list):
        raise ShapeError("expected a list of dimensions")
    return [expr_from_json(d) for d in items]


_REPLAY = {
    "permute": lambda st, a: st.permute([int(x) for x in a]),
    "reshape": lambda st, a: st.reshape(_exprs(a)),
    "expand": lambda st, a: st.expand(_exprs(a)),
    "slice": lambda st, a: st.slice([(expr_from_json(x), expr_from_json(y), s) for x, y, s in a]),
    "pad": lambda st, a: st.pad([(expr_from_json(x), expr_from_json(y)) for x, y in a]),
    "flip": lambda st, a: st.flip([int(x) for x in a]),
}


def _unflatten(old_shape, new_shape, old_axes, new_axes) -> list[Expr]:
    """The old indices of `old_axes` from the new ones of `new_axes`, through their row-major position (both
    sets of axes span the same elements)."""
    new_axes, old_axes = list(new_axes), list(old_axes)
    flat = const(0)
    for k, s in zip(new_axes, contiguous_strides([new_shape[k] for k in new_axes])):
        flat = flat + idx(k, new_shape[k]) * s
    old = []
    for pos, s in enumerate(contiguous_strides([old_shape[k] for k in old_axes])):
        d = as_expr(old_shape[old_axes[pos]])
        # A size that may be 0 means no element is ever read; max(., 1) keeps the arithmetic defined.
        s, d = (s if s.lo >= 1 else s.max(1)), (d if d.lo >= 1 else d.max(1))
        q = flat // s
        old.append(q if pos == 0 else q % d)  # the outermost index needs no wrap: flat < the group's size
    return old


def _regrouped(old_shape, new_shape) -> list[Expr] | None:
    """Old indices for a reshape that splits and merges runs of adjacent axes, each run mapped on its own: axes
    of size 1 come and go with index 0, an axis kept whole keeps its index, and no division reaches across
    runs (the general form divides the whole flat position, which a simplifier cannot undo when a symbolic
    batch axis lies outside the run). None when the runs cannot be matched by their sizes."""
    old: list[Expr | None] = [None] * len(old_shape)
    i = j = 0
    while i < len(old_shape) or j < len(new_shape):
        if i < len(old_shape) and as_expr(old_shape[i]) == 1:
            old[i], i = const(0), i + 1
            continue
        if j < len(new_shape) and as_expr(new_shape[j]) == 1:
            j += 1
            continue
        if i == len(old_shape) or j == len(new_shape):
            return None
        old_axes, new_axes = [i], [j]
        have, want = as_expr(old_shape[i]), as_expr(new_shape[j])
        i, j = i + 1, j + 1
        while have != want:
            if have.lo < 1 or want.lo < 1:
                return None  # a size that may be 0 divides nothing
            if (want // have) * have == want and i < len(old_shape):  # the old run is a factor short
                have, old_axes, i = have * as_expr(old_shape[i]), old_axes + [i], i + 1
            elif (have // want) * want == have and j < len(new_shape):
                want, new_axes, j = want * as_expr(new_shape[j]), new_axes + [j], j + 1
            else:
                return None
        if len(old_axes) == len(new_axes) == 1:
            old[old_axes[0]] = idx(new_axes[0], new_shape[new_axes[0]])
        else:
            for k, e in zip(old_axes, _unflatten(old_shape, new_shape, old_axes, new_axes)):
                old[k] = e
    return old
