"""The term language of the search: one egglog constructor per primitive op, over one sort, `Tensor`.

A term is a node's output buffer (contiguous, of the node's shape). Every input edge is the producing term
plus a *view id*: an i64 key into the Python-side view table of an `Encoding` (`encode.py`), so the e-graph
compares views by key and never reasons about index expressions. Op parameters are plain literals (axis,
dtype name, constant value, label) or, where a literal cannot hold them (an Input's symbolic shape, an
Iota's expression), a key into the Encoding's parameter table.

Every constructor's egglog name is its Python name, and for a primitive that is the op's own name
(`ops.Add.name == "Add"`), so both extraction paths decode a term by name alone. Two constructors are not ops:
- `View(x, v)`: the buffer of `x` read through view `v`. Only rules create it; extraction turns it into an
  alias (consumers read `x` through the composed view), never into a node.
- `NegZero(dtype)`: the float constant -0.0. egglog's f64 is an ordered float in which -0.0 == 0.0, so both
  would hash-cons into one e-node and a round trip would lose the sign (1 / -0 is -inf, not inf).

View facts (`unpadded`, `scalar_view`, `identity_view`, `axes_read`, `reads_once`, `base_view`) are computed in
Python for every view in the table and `set` into the e-graph, so rules can test a view without interpreting it.
They are functions without a merge: a second, different value for one key is a bug and makes egglog fail loudly.
"""

from __future__ import annotations

from egglog import Bool, Expr, StringLike, f64Like, function, i64, i64Like


class Tensor(Expr):
    """A node's output: a contiguous buffer of the node's shape."""


class Sinks(Expr):
    """The e-graph's root: the outputs and signature inputs, as a cons list (extraction starts here)."""


@function(egg_fn="NoSinks")
def NoSinks() -> Sinks: ...


@function(egg_fn="Sink")
def Sink(head: Tensor, rest: Sinks) -> Sinks: ...


# ---- leaves --------------------------------------------------------------------------------------------


@function(egg_fn="Input")
def Input(label: StringLike, key: i64Like) -> Tensor: ...  # key: the ops.Input in the parameter table


@function(egg_fn="Weight")
def Weight(label: StringLike, key: i64Like) -> Tensor: ...  # key: the ops.Weight in the parameter table


@function(egg_fn="ConstF")
def ConstF(value: f64Like, dtype: StringLike) -> Tensor: ...  # a float scalar other than -0.0


@function(egg_fn="NegZero")
def NegZero(dtype: StringLike) -> Tensor: ...  # the float scalar -0.0


@function(egg_fn="ConstI")
def ConstI(value: i64Like, dtype: StringLike) -> Tensor: ...  # an integer or bool (0/1) scalar


@function(egg_fn="Iota")
def Iota(key: i64Like) -> Tensor: ...  # key: the ops.Iota (expression, shape, dtype) in the parameter table


# ---- compute ops: each input is (term, view id) --------------------------------------------------------


@function(egg_fn="Log2")
def Log2(x: Tensor, v: i64Like) -> Tensor: ...


@function(egg_fn="Exp2")
def Exp2(x: Tensor, v: i64Like) -> Tensor: ...


@function(egg_fn="Sin")
def Sin(x: Tensor, v: i64Like) -> Tensor: ...


@function(egg_fn="Sqrt")
def Sqrt(x: Tensor, v: i64Like) -> Tensor: ...


@function(egg_fn="Recip")
def Recip(x: Tensor, v: i64Like) -> Tensor: ...


@function(egg_fn="Add")
def Add(a: Tensor, va: i64Like, b: Tensor, vb: i64Like) -> Tensor: ...


@function(egg_fn="Mul")
def Mul(a: Tensor, va: i64Like, b: Tensor, vb: i64Like) -> Tensor: ...


@function(egg_fn="Mod")
def Mod(a: Tensor, va: i64Like, b: Tensor, vb: i64Like) -> Tensor: ...


@function(egg_fn="LessThan")
def LessThan(a: Tensor, va: i64Like, b: Tensor, vb: i64Like) -> Tensor: ...


@function(egg_fn="SumReduce")
def SumReduce(x: Tensor, v: i64Like, axis: i64Like) -> Tensor: ...


@function(egg_fn="MaxReduce")
def MaxReduce(x: Tensor, v: i64Like, axis: i64Like) -> Tensor: ...


@function(egg_fn="Gather")
def Gather(data: Tensor, vd: i64Like, indexes: Tensor, vi: i64Like) -> Tensor: ...


@function(egg_fn="Scatter")
def Scatter(dest: Tensor, vd: i64Like, indexes: Tensor, vi: i64Like, src: Tensor, vs: i64Like) -> Tensor: ...


@function(egg_fn="Cast")
def Cast(x: Tensor, v: i64Like, dtype: StringLike) -> Tensor: ...


# Made by rules only (search/rules_matmul.py): SumReduce(axis) of Mul(a, b) as one contraction, a GEMM.
@function(egg_fn="MatMul")
def MatMul(a: Tensor, va: i64Like, b: Tensor, vb: i64Like, axis: i64Like) -> Tensor: ...


# Made by attention recognition (search/rules_attention.py): softmax(scale * q.k + bias).v, scores unstored.
@function(egg_fn="Attention")
def Attention(
    q: Tensor,
    vq: i64Like,
    k: Tensor,
    vk: i64Like,
    v: Tensor,
    vv: i64Like,
    bias: Tensor,
    vb: i64Like,
    scale: f64Like,
    safe: i64Like,
) -> Tensor: ...


@function(egg_fn="Output")
def Output(x: Tensor, v: i64Like, label: StringLike) -> Tensor: ...


# Made by the fusion rules only (search/rules_fusion.py): `x` computed in the loop of the kernel that reads it,
# never stored. `v` is the identity view of x's buffer, so the term is an ordinary edge; the reader's own view
# still sits on the reader. The cost of choosing it is x's work without x's store and launch (costs.py).
@function(egg_fn="Inline")
def Inline(x: Tensor, v: i64Like) -> Tensor: ...


# Made by rules only; extraction makes it an alias. Cost 0: an alias is free, and with cost 1 `View(View(x))`
# would tie with the `Recip(Recip(x))` it replaces. Rules never make a View of its own e-class, so no cycle.
@function(egg_fn="View", cost=0)
def View(x: Tensor, v: i64Like) -> Tensor: ...


# ---- facts about views (set from Python for every view in the table) ----------------------------------


@function(egg_fn="unpadded")
def unpadded(v: i64Like) -> Bool: ...  # true when the view reads no padding (padding reads 0)


@function(egg_fn="scalar_view")
def scalar_view(v: i64Like) -> i64: ...  # the view that broadcasts a scalar to this view's shape


@function(egg_fn="identity_view")
def identity_view(v: i64Like) -> Bool: ...  # true when the view reads its whole buffer in order, unpadded


@function(egg_fn="axes_read")
def axes_read(v: i64Like) -> i64: ...  # bit k set when the view's index depends on axis k (-1 past 62 axes)


@function(egg_fn="reads_once")
def reads_once(v: i64Like) -> Bool: ...  # true when the view reads no buffer element twice (no broadcast)


@function(egg_fn="base_view")
def base_view(v: i64Like) -> i64: ...  # the identity view of the buffer this view reads (its base shape)


# The e-nodes of the term language (what a node budget counts; facts and analyses are not e-nodes).
CONSTRUCTORS = frozenset(
    (NoSinks, Sink, Input, Weight, ConstF, NegZero, ConstI, Iota, Log2, Exp2, Sin, Sqrt, Recip, Add, Mul, Mod)
    + (LessThan, SumReduce, MaxReduce, Gather, Scatter, Cast, Output, View, MatMul, Attention, Inline)
)
