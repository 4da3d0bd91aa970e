"""Kernel fusion in the IR: inlining a producer kernel's body into the loads of its consumer.

Inlining is substitution. A consumer reads the producer's buffer at a flat position `I`; the producer's
body is written over its own indices `_i0..`; unflattening `I` into those indices (div/mod by the
producer's contiguous strides) and substituting gives the consumer a body that never touches the buffer.
The symbolic simplifier folds the div/mod arithmetic away whenever the layouts line up, and a reduction
variable of the producer is renamed first so it cannot capture one of the consumer's.

`inline` is the mechanism. What to inline is the search's choice where the graph was searched (the fusion rules
and extraction, carried out by compiler/fusion/fuse_chosen.py with the checks below). `fuse_single_consumers` is the
policy for a graph compiled without the search, and for what the search could not see after it (fusion across
the cuts of a graph searched in segments): it inlines every element-wise or reduction kernel whose buffer has
exactly one reading kernel, when the roofline cost model (compiler/analysis/cost.py) does not get worse. A row
statistic (a norm's mean, a softmax's sum) inlined into the kernel that reads it along the row is computed
once per row there (compiler/kernels/hoist.py), so a norm or softmax fuses into few kernels without recomputation.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace

from luminal.compiler.fusion.limits import too_large_inlined, tree_within, within_limits
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.affine import affine
from luminal.compiler.kernels.bounded_index import axes_extents, fold_value
from luminal.compiler.kernels.hoist import invariant_reductions
from luminal.compiler.kernels.settle import settle
from luminal.symbolic import Expr, as_expr, var
from luminal.symbolic.expr import Substitution
from luminal.view import ShapeTracker, contiguous_strides


def _variables(e: Expr) -> dict[str, Expr]:
    """The variable nodes of `e` by name (with the ranges they were made with)."""
    if e.op == "var":
        return {e.args[0]: e}
    found: dict[str, Expr] = {}
    for a in e.args:
        if isinstance(a, Expr):
            found.update(_variables(a))
    return found


def _matched_axes(flat: Expr, shape: tuple[Expr, ...], extents: dict[str, Expr]) -> dict[str, Expr] | None:
    """Each producer axis read by its own consumer loop variable: `flat` is the sum of those variables times the
    producer's strides, each variable ranging over exactly that axis's extent, plus, for at most one axis that
    no variable reads, a fixed position times its stride (a row of a stack). The index of an axis is then the
    variable itself, or that position, which the general route through the flat position cannot always show
    when sizes are symbolic ((384 * s + c) // (384 * seq) is 0 only because s < seq)."""
    names = sorted(flat.symbols() & extents.keys())
    found = affine(flat, names)
    if found is None:
        return None
    (offset, coefficient), nodes = found, _variables(flat)
    table, used, unmatched = {}, set(), []
    for k, (d, stride) in enumerate(zip(shape, contiguous_strides(shape))):
        if as_expr(d) == 1:
            table[f"_i{k}"] = as_expr(0)
            continue
        match = [n for n in names if n not in used and coefficient[n] == stride and extents[n] == as_expr(d)]
        if len(match) > 1:
            return None
        if not match:
            unmatched.append((k, as_expr(d), stride))
            continue
        used.add(match[0])
        table[f"_i{k}"] = nodes[match[0]]
    if not all(n in used or coefficient[n] == 0 for n in names) or len(unmatched) > 1:
        return None
    if not unmatched:
        return table if offset == 0 else None
    # One axis read at a fixed position (a row of a stack): the offset is that position times its stride.
    k, d, stride = unmatched[0]
    if offset == 0:
        table[f"_i{k}"] = as_expr(0)
        return table
    if stride.lo < 1:
        return None
    position = offset // stride
    if position * stride != offset or position.lo < 0 or position.hi >= d.lo:
        return None
    table[f"_i{k}"] = position
    return table


# (flat, shape, extents, variable ranges) -> its unflattening. The layers of a transformer read their producers
# at the same positions, and each candidate is fused separately: without this, symbolic simplification was a
# third of a 12-layer encoder's compile time. Expressions compare without their variables' ranges, which the
# simplifier uses, so the ranges are part of the key.
_UNFLATTENED: dict[tuple, dict[str, Expr]] = {}
_UNFLATTENED_MAX = 50_000


def unflatten(flat: Expr, shape: tuple[Expr, ...], extents: dict[str, Expr] | None = None) -> dict[str, Expr]:
    dims = tuple(as_expr(d) for d in shape)
    scope = tuple(sorted((extents or {}).items()))
    variables: dict[str, Expr] = {}
    for e in (flat, *dims, *(e for _, e in scope)):
        variables.update(_variables(e))
    key = (flat, dims, scope, tuple(sorted((name, v.lo, v.hi) for name, v in variables.items())))
    found = _UNFLATTENED.get(key)
    if found is None:
        found = _unflatten_uncached(flat, shape, extents)
        if len(_UNFLATTENED) >= _UNFLATTENED_MAX:
            _UNFLATTENED.clear()
        _UNFLATTENED[key] = found
    return found


def _unflatten_uncached(flat: Expr, shape: tuple[Expr, ...], extents: dict[str, Expr] | None) -> dict[str, Expr]:
    matched = _matched_axes(flat, shape, extents) if extents else None
    if matched is not None:
        return matched
    table = {}
    for k, (d, s) in enumerate(zip(shape, contiguous_strides(shape))):
        s = s if s.lo >= 1 else s.max(1)
        d = as_expr(d) if as_expr(d).lo >= 1 else as_expr(d).max(1)
        table[f"_i{k}"] = flat // s if k == 0 else (flat // s) % d
    return table


def rename_reductions(v: ir.Value, names: Iterator[int]) -> ir.Value:
    """A copy of `v` whose Reduce variables are fresh, so inlining cannot capture the consumer's variables. A
    subtree with no reduction is `v`'s own: it has nothing to rename, and a copy would lose the subtrees it
    shares (which the walks after it then see as a tree)."""
    if not ir.holds(v, ir.Reduce, ir.Contract):
        return v
    if isinstance(v, ir.Reduce):
        name = f"_r{next(names)}"
        body = substitute_indices(rename_reductions(v.body, names), {v.var: var(name, 0, max(v.extent.hi - 1, 0))})
        return replace(v, var=name, body=body)
    if isinstance(v, ir.Apply):
        return replace(v, args=tuple(rename_reductions(a, names) for a in v.args))
    if isinstance(v, ir.Guard):
        return replace(v, value=rename_reductions(v.value, names))
    if isinstance(v, ir.GatherLoad):
        return replace(v, at=rename_reductions(v.at, names))
    if isinstance(v, ir.Contract):
        name = f"_r{next(names)}"
        fresh = {v.var: var(name, 0, max(v.extent.hi - 1, 0))}
        a = substitute_indices(rename_reductions(v.a, names), fresh)
        return replace(v, var=name, a=a, b=substitute_indices(rename_reductions(v.b, names), fresh))
    return v


def substitute_indices(v: ir.Value, table: dict[str, Expr]) -> ir.Value:
    """Substitute index variables throughout a value tree (loads, guards, iotas, extents, gathers)."""
    return _IndexSubstitution(table).value(v)


class _IndexSubstitution:
    """`substitute_indices` by one table. A subtree that occurs more than once (one object read in several
    places, as inlining leaves them) is substituted once, and so is each index expression the tree shares:
    re-simplifying index expressions is most of the time fusion takes."""

    def __init__(self, table: dict[str, Expr]):
        self.table = table
        self.expr = Substitution(table)
        self.done: dict[int, ir.Value] = {}  # id of a node of the tree (alive while this is used) -> its result
        self.under: dict[str, _IndexSubstitution] = {}

    def bound(self, name: str) -> _IndexSubstitution:
        """The substitution inside a binder of `name` (a reduction's or a gather's variable), which it leaves."""
        if name not in self.table:
            return self
        if name not in self.under:
            self.under[name] = _IndexSubstitution({k: e for k, e in self.table.items() if k != name})
        return self.under[name]

    def value(self, v: ir.Value) -> ir.Value:
        out = self.done.get(id(v))
        if out is None:
            out = self.done[id(v)] = self._substituted(v)
        return out

    def _substituted(self, v: ir.Value) -> ir.Value:
        # The commonest nodes built directly: dataclasses.replace costs several times a constructor's call.
        sub = self.expr
        if isinstance(v, ir.Load):
            return ir.Load(v.buffer, sub(v.index), v.dtype)
        if isinstance(v, ir.IndexValue):
            return replace(v, expr=sub(v.expr))
        if isinstance(v, ir.Guard):
            return ir.Guard(sub(v.valid), self.value(v.value), v.dtype)
        if isinstance(v, ir.Apply):
            return ir.Apply(v.op, tuple(self.value(a) for a in v.args), v.dtype)
        if isinstance(v, ir.Reduce):
            inner = self.bound(v.var)
            return replace(v, extent=inner.expr(v.extent), body=inner.value(v.body))
        if isinstance(v, ir.GatherLoad):
            inner = self.bound("_g").expr
            at = self.value(v.at)
            return replace(v, at=at, index=inner(v.index), valid=inner(v.valid), limit=inner(v.limit))
        if isinstance(v, ir.Contract):
            inner = self.bound(v.var)
            return replace(v, extent=inner.expr(v.extent), a=inner.value(v.a), b=inner.value(v.b))
        return v


def _guarded_extents(valid: Expr, extents: dict[str, Expr]) -> dict[str, Expr]:
    """`extents` narrowed by a guard's `var < bound` terms: under the guard the variable stays below `bound`.
    A concatenation's first part reads its producer under `_i2 < n` while its loop runs to n + 1; without the
    bound the read's axes do not match the producer's and its index goes through divisions by symbolic extents."""
    narrowed = dict(extents)
    terms = [valid]
    while terms:
        term = terms.pop()
        if term.op == "and":
            terms.extend(a for a in term.args if isinstance(a, Expr))
        elif term.op == "lt" and term.args[0].op == "var" and term.args[0].args[0] in narrowed:
            name, bound = term.args[0].args[0], term.args[1]
            if bound.lo >= 1:  # extents elsewhere are at least 1 (a later max(1) would not match the producer)
                narrowed[name] = bound
    return narrowed


def _replace_loads(v: ir.Value, producer: ir.LoopKernel, body: ir.Value, extents: dict[str, Expr]) -> ir.Value:
    """`v` with loads of the producer's buffer replaced by `body` (the producer's, renamed) at their indices.
    `extents`: the range of every loop variable in scope (the consumer's axes, enclosing reductions)."""
    return _LoadReplacement(producer, body).value(v, extents)


class _LoadReplacement:
    """`_replace_loads` for one producer and body. A subtree the tree holds in several places is replaced once
    per scope where its result holds no reduction: a chain of ops that each read their input twice (an integer
    division's correction steps) is a small DAG, and walked as a tree it took a minute to fuse. A result holding a
    reduction or a GEMM is made afresh at each place, as before: which reductions a GPU row kernel hoists is
    told by their identity (`_every_reduction_hoisted`), and sharing them would change what fuses."""

    def __init__(self, producer: ir.LoopKernel, body: ir.Value):
        self.producer, self.body = producer, body
        self.body_shareable = not ir.holds(body, ir.Reduce, ir.Contract)
        self.done: dict[tuple[int, int], ir.Value] = {}  # (id of a node, id of its scope) -> its replacement
        self.scopes: list[dict[str, Expr]] = []  # every scope made here, alive while their ids are keys

    def value(self, v: ir.Value, extents: dict[str, Expr]) -> ir.Value:
        found = ir.summary(v)
        if self.producer.out not in found.buffers:
            return v  # nothing to replace below: the subtree itself, not a copy of it
        if not self.body_shareable or ir.Reduce in found.kinds or ir.Contract in found.kinds:
            return self._replaced(v, extents)
        # Equal reads of the producer (separate objects: lowering reads an operand once per use) share one copy:
        # a read is keyed by its index expression (made once each; its buffer and type are the producer's).
        key = (id(v.index) if type(v) is ir.Load else id(v), id(extents))
        out = self.done.get(key)
        if out is None:
            out = self.done[key] = self._replaced(v, extents)
        return out

    def scope(self, extents: dict[str, Expr]) -> dict[str, Expr]:
        self.scopes.append(extents)
        return extents

    def _replaced(self, v: ir.Value, extents: dict[str, Expr]) -> ir.Value:
        producer, within = self.producer, self.value
        if isinstance(v, ir.Load) and v.buffer == producer.out:
            # At a constant index (a row of a stack, an unrolled step) some of the producer's guards are decided.
            return settle(substitute_indices(self.body, unflatten(v.index, producer.shape, extents)))
        if isinstance(v, ir.Guard):
            return ir.Guard(v.valid, within(v.value, self.scope(_guarded_extents(v.valid, extents))), v.dtype)
        if isinstance(v, ir.Apply):
            return ir.Apply(v.op, tuple(within(a, extents) for a in v.args), v.dtype)
        if isinstance(v, ir.Reduce):
            return replace(v, body=within(v.body, self.scope({**extents, v.var: v.extent})))
        if isinstance(v, ir.GatherLoad):
            return replace(v, at=within(v.at, extents))
        if isinstance(v, ir.Attend):  # only where may_inline allows it: a CUDA attention evaluates its operands
            inner = self.scope({**extents, v.s_var: v.s_extent, v.e_var: v.e_extent})
            return replace(v, **{f: within(getattr(v, f), inner) for f in ("q", "k", "v", "bias")})
        # A Contract's operands are never fused into: they stay loads a GEMM can pack (see may_inline).
        return v


def inline_value(producer: ir.LoopKernel, v: ir.Value, extents: dict[str, Expr], names: Iterator[int]) -> ir.Value:
    """`v`, over loop variables of `extents`, with every plain load of the producer's buffer replaced by its body
    (a scatter's source computing its producer)."""
    return _replace_loads(v, producer, rename_reductions(producer.body, names), extents)


def inline(producer: ir.LoopKernel, consumer: ir.LoopKernel, names: Iterator[int] | None = None) -> ir.LoopKernel:
    """The consumer with every plain load of the producer's buffer replaced by the producer's body.

    `names` numbers the renamed reduction variables; one counter per program keeps compiles deterministic.
    """
    names = itertools.count(1000) if names is None else names  # lowering uses _r0: start well above it
    # Renamed once: two reads of one element then inline equal values, which a GEMM epilogue computes once
    # (a reduction's variable is bound by its own loop, so equal copies cannot capture each other's).
    body = rename_reductions(producer.body, names)
    extents = {f"_i{k}": as_expr(d) for k, d in enumerate(consumer.shape)}
    return replace(consumer, body=_replace_loads(consumer.body, producer, body, extents))


def readers_of(program: ir.KernelProgram) -> dict[str, list[int]]:
    readers: dict[str, list[int]] = {}
    for k, kernel in enumerate(program.kernels):
        for name in ir.buffers_read(kernel):
            readers.setdefault(name, []).append(k)
    return readers


def gathered(kernel: ir.Kernel) -> set[str]:
    values = [kernel.body] if isinstance(kernel, ir.LoopKernel) else [kernel.dest, kernel.at, kernel.src]
    gathers = (n for v in values if ir.holds(v, ir.GatherLoad) for n in ir.distinct(v))
    return {n.buffer for n in gathers if isinstance(n, ir.GatherLoad)}


def _read_by_contract(buffer: str, consumer: ir.LoopKernel) -> bool:
    return ir.holds(consumer.body, ir.Contract) and any(
        isinstance(n, ir.Contract) and any(isinstance(m, ir.Load) and m.buffer == buffer for m in ir.distinct(n))
        for n in ir.distinct(consumer.body)
    )


GPU_KINDS = ("cuda", "metal")  # targets whose kernels run CUDA's bodies (Metal's too): attention, row kernels


def attends(kernel: ir.LoopKernel) -> bool:
    return ir.holds(kernel.body, ir.Attend)


def may_inline(producer: ir.LoopKernel, consumer: ir.LoopKernel, target=None) -> bool:
    """Whether `consumer` may compute `producer` at all: never as a GEMM's operand (packing reads an operand
    once per tile, a fused producer would be recomputed per output column), never as gathered data, and
    neither may be an attention (the C generator packs its operands straight from buffers), except that on a
    CUDA or Metal target (`target`'s kind) an attention may compute an element-wise producer of its operands:
    the CUDA attention, whose body Metal runs too, evaluates each operand as an expression where it reads it
    (compiler/gpu/attention.py), so a decode step's key and value casts and the KV cache's concatenation cost
    no launch and no copy of the cache.
    """
    if attends(producer) or producer.out in gathered(consumer):
        return False
    if attends(consumer):
        gpu = getattr(target, "kind", None) in GPU_KINDS
        return gpu and not ir.holds(producer.body, ir.Reduce, ir.Contract)
    return not _read_by_contract(producer.out, consumer)


def reads_reduction_once(producer: ir.LoopKernel, consumer: ir.LoopKernel) -> bool:
    """Whether each element of a reducing producer is read once, in place. Read otherwise (broadcast along a
    row) it is inlined only where the code generator hoists it out of the loop, so the fused kernel does no
    more arithmetic than the two it replaces."""
    if not ir.holds(producer.body, ir.Reduce, ir.Contract):
        return True
    if consumer.shape != producer.shape:
        return False
    flat = ShapeTracker.contiguous(consumer.shape).index
    loads = [n for n in ir.distinct(consumer.body) if isinstance(n, ir.Load) and n.buffer == producer.out]
    return all(n.index == flat for n in loads)


def repeats_reductions(producer: ir.LoopKernel, consumer: ir.LoopKernel, fused: ir.LoopKernel, costs, target) -> bool:
    """Whether `fused` (the consumer computing the producer; `costs` the three kernels' estimates) does more
    arithmetic than the two it replaces because of a reduction it reads: one read where it is not hoisted
    (compiler/kernels/hoist.py) would run once per read. On a GPU target a kernel whose every reduction is hoisted out
    of its innermost loop is a row kernel: each threadgroup computes the row's reductions once, and what its
    threads then repeat per element (the rsqrt of a LayerNorm's variance) costs no read and no launch."""
    if reads_reduction_once(producer, consumer) or costs[2].flops <= costs[0].flops + costs[1].flops:
        return False
    return not (getattr(target, "kind", None) in GPU_KINDS and _every_reduction_hoisted(fused))


def _every_reduction_hoisted(k: ir.LoopKernel) -> bool:
    if not k.shape:
        return False
    hoisted = invariant_reductions(k.body, f"_i{len(k.shape) - 1}", k.shape[-1])
    inside = {id(n) for r in hoisted for n in ir.distinct(r)}
    return all(id(n) in inside for n in ir.distinct(k.body) if isinstance(n, (ir.Reduce, ir.Contract)))


def fuse_single_consumers(program: ir.KernelProgram, target, env: dict[str, int] | None = None) -> ir.KernelProgram:
    """Inline each temp kernel read by exactly one loop kernel (never through a gather) when it does not cost more.

    One pass from the last kernel to the first: when a kernel is reached, its readers have already absorbed what
    they will, and the reader table follows every absorption, so chains fuse transitively and a buffer whose two
    readers merged into one is seen with its single remaining reader.
    """
    from luminal.compiler.analysis.cost import KernelCosts

    outputs = {buf for buf, _ in program.outputs.values()}
    kernels: list[ir.Kernel | None] = list(program.kernels)
    readers = readers_of(program)
    names = itertools.count(1000)
    gpu = getattr(target, "kind", None) in GPU_KINDS
    # A consumer that absorbs a chain is estimated as the fused kernel of one step and again as the consumer of
    # the next: each kernel object is estimated once.
    cost_of = KernelCosts(program.buffers, target, env)
    for k in reversed(range(len(kernels))):
        producer = kernels[k]
        if not isinstance(producer, ir.LoopKernel) or producer.out in outputs:
            continue
        users = readers.get(producer.out, [])
        if len(users) != 1 or not isinstance(kernels[users[0]], ir.LoopKernel):
            continue
        consumer = kernels[users[0]]
        if not may_inline(producer, consumer, target):
            continue
        if too_large_inlined(producer, consumer):
            continue
        fused = inline(producer, consumer, names)
        if not tree_within(fused.body):  # too large, folded or not: folding indices keeps every node
            continue
        if gpu:  # indices folded by the loops' extents first, so that a row's reductions are seen to be hoisted
            fused = replace(fused, body=fold_value(fused.body, axes_extents(fused.shape)))
        if not within_limits(fused):
            continue
        costs = [cost_of(k) for k in (producer, consumer, fused)]
        if costs[2].seconds > costs[0].seconds + costs[1].seconds:
            continue
        if repeats_reductions(producer, consumer, fused, costs, target):
            continue
        kernels[users[0]], kernels[k] = fused, None
        for name in ir.buffers_read(producer):  # what the producer read, its consumer now reads
            readers[name] = sorted({users[0] if r == k else r for r in readers[name]})
    return with_kernels(program, [kernel for kernel in kernels if kernel is not None])


def with_kernels(program: ir.KernelProgram, kept: list[ir.Kernel]) -> ir.KernelProgram:
    """`program` running `kept` instead of its kernels, without the buffers nothing writes or reads any more."""
    outputs = {buf for buf, _ in program.outputs.values()}
    used = {n for kernel in kept for n in ir.buffers_read(kernel) | {kernel.out}}
    used |= outputs | set(program.inputs.values()) | set(program.weights.values())
    buffers = {n: b for n, b in program.buffers.items() if n in used}
    return ir.KernelProgram(buffers, kept, program.inputs, program.weights, program.outputs, program.symbols)
