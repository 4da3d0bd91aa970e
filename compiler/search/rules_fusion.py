"""Fusion rules: which producers a kernel may compute in its own loop instead of reading them from a buffer.

A term is a stored buffer. These rules add, next to a reader `R(.., x, v, ..)`, the alternative
`R(.., Inline(x, base_view(v)), v, ..)`: the same value, with `x` computed in R's loop and never stored.
Extraction then chooses, reader by reader, whether a producer is stored or inlined (search/costs.py charges
an inlined producer its work without its store and launch), and lowering carries the choice out on the
kernel IR (compiler/fusion/fuse_chosen.py), where inlining is substitution.

Two rule sets, as the kinds of fusion they make:
- `elementwise`: element-wise readers (and a gather's index, and an output read through a view) take
  element-wise producers, so a chain of element-wise ops and views becomes one kernel;
- `reduce`: a reduction takes element-wise producers (a sum of squares never stores the squares), and
  element-wise readers and reductions take statistics: a reduction, or element-wise ops over statistics and
  constants (a norm's mean, its 1/sqrt(var + eps), a softmax's sum), which the C generator computes once
  per row (compiler/kernels/hoist.py), so a layer norm or a softmax becomes one pass over each row.
A GEMM's epilogue is matmul recognition's own (rules_matmul.py: `EPILOGUE`).

Which producer a rule may take is a relation over e-classes (`elementwise`, `reduced`, `statistic`), set by
rules per constructor, so one rule per reader covers every producer. Nothing inlines a leaf (an input, a
weight: they are buffers already), an attention (its kernel packs operands from buffers) or a scatter.
Element-wise producers are offered only where the reader's view reads each element once (`reads_once`):
through a broadcast the producer would be recomputed for every copy, which the per-e-node costs cannot see
(a norm's output inlined into a matmul's expanded product would run once per output column). Statistics are
offered through broadcasts, which is what hoisting is for.

The rules only say what may be fused; whether a fused kernel stays within what the kernel IR generates well
(one GEMM per kernel, a reduction computed in one reader and only where it is hoisted, bounded C text, a
value recomputed in several readers only where that is cheaper than storing it) is checked where it is
carried out.
"""

from __future__ import annotations

from collections.abc import Iterator

from egglog import Bool, String, eq, f64, i64, relation, rule, ruleset, union, var, vars_

from luminal.compiler.search import terms as T

elementwise = relation("elementwise", T.Tensor)  # the e-class holds an element-wise op (or a gather, an iota)
reduced = relation("reduced", T.Tensor)  # the e-class holds a sum or max reduction
# A reduction, or element-wise ops over statistics and constants only (a norm's 1/sqrt(var + eps)): a value
# per row that a reader along the row may compute once per row.
statistic = relation("statistic", T.Tensor)
constant = relation("constant", T.Tensor)

x, y, z = vars_("x y z", T.Tensor)
va, vb, vx, ax, key = vars_("va vb vx ax key", i64)
name = var("name", String)
number = var("number", f64)

UNARY = (T.Log2, T.Exp2, T.Sin, T.Sqrt, T.Recip)
BINARY = (T.Add, T.Mul, T.Mod, T.LessThan)
REDUCE = (T.SumReduce, T.MaxReduce)


def _producers() -> Iterator:
    for op in UNARY:
        yield rule(eq(x).to(op(y, va))).then(elementwise(x))
    for op in BINARY:
        yield rule(eq(x).to(op(y, va, z, vb))).then(elementwise(x))
    yield rule(eq(x).to(T.Cast(y, va, name))).then(elementwise(x))
    yield rule(eq(x).to(T.Gather(y, va, z, vb))).then(elementwise(x))
    yield rule(eq(x).to(T.Iota(key))).then(elementwise(x))
    for op in REDUCE:
        yield rule(eq(x).to(op(y, va, ax))).then(reduced(x))


def _statistics() -> Iterator:
    yield rule(eq(x).to(T.ConstF(number, name))).then(constant(x))
    yield rule(eq(x).to(T.ConstI(key, name))).then(constant(x))
    yield rule(eq(x).to(T.NegZero(name))).then(constant(x))
    yield rule(reduced(x)).then(statistic(x))
    for op in UNARY:
        yield rule(eq(x).to(op(y, va)), statistic(y)).then(statistic(x))
    yield rule(eq(x).to(T.Cast(y, va, name)), statistic(y)).then(statistic(x))
    for op in BINARY:
        for first, second in ((statistic, statistic), (statistic, constant), (constant, statistic)):
            yield rule(eq(x).to(op(y, va, z, vb)), first(y), second(z)).then(statistic(x))


def _inlined(producer, view, once: bool):
    """The facts that make `producer` read through `view` inlinable, and its Inline term. With `once`, only
    where the view reads no element twice: a producer read through a broadcast would be recomputed for every
    copy (a norm's output inlined into a matmul's expanded product, once per output column)."""
    facts = [eq(vx).to(T.base_view(view))] + ([eq(T.reads_once(view)).to(Bool(True))] if once else [])
    return facts, T.Inline(producer, vx)


def elementwise_readers(producer_class, once: bool = True) -> Iterator:
    """Rules letting every element-wise reader (and a gather's index) inline a producer in `producer_class`."""
    for op in UNARY:
        facts, inline = _inlined(y, va, once)
        yield rule(eq(x).to(op(y, va)), producer_class(y), *facts).then(union(x).with_(op(inline, va)))
    for op in BINARY:
        facts, inline = _inlined(y, va, once)
        yield rule(eq(x).to(op(y, va, z, vb)), producer_class(y), *facts).then(union(x).with_(op(inline, va, z, vb)))
        facts, inline = _inlined(z, vb, once)
        yield rule(eq(x).to(op(y, va, z, vb)), producer_class(z), *facts).then(union(x).with_(op(y, va, inline, vb)))
    facts, inline = _inlined(y, va, once)
    yield rule(eq(x).to(T.Cast(y, va, name)), producer_class(y), *facts).then(union(x).with_(T.Cast(inline, va, name)))
    facts, inline = _inlined(z, vb, once)  # the indexes only: gathered data must be a buffer
    yield rule(eq(x).to(T.Gather(y, va, z, vb)), producer_class(z), *facts).then(
        union(x).with_(T.Gather(y, va, inline, vb))
    )


def _reduce_readers(producer_class, once: bool) -> Iterator:
    for op in REDUCE:
        facts, inline = _inlined(y, va, once)
        yield rule(eq(x).to(op(y, va, ax)), producer_class(y), *facts).then(union(x).with_(op(inline, va, ax)))


def _output_readers() -> Iterator:
    """An output read through a view (a final transpose or slice) is a copy kernel that can compute its value;
    one read whole is its producer's own buffer, and stays so."""
    facts, inline = _inlined(y, va, once=True)
    yield rule(eq(x).to(T.Output(y, va, name)), elementwise(y), eq(T.identity_view(va)).to(Bool(False)), *facts).then(
        union(x).with_(T.Output(inline, va, name))
    )


ELEMENTWISE = [*_producers(), *elementwise_readers(elementwise), *_output_readers()]
# A statistic read through a broadcast (along its row) is inlined where the C generator computes its
# reductions once per row (compiler/kernels/hoist.py); that is checked on the kernel IR
# (compiler/fusion/fuse_chosen.py).
REDUCE_FUSION = [
    *_statistics(),
    *_reduce_readers(elementwise, once=True),
    *_reduce_readers(statistic, once=False),
    *elementwise_readers(statistic, once=False),
]

RULESETS = {"elementwise": ELEMENTWISE, "reduce": REDUCE_FUSION}
fusion = ruleset(*ELEMENTWISE, *REDUCE_FUSION, name="fusion")
