"""Equal subtrees of a value tree made one object, so that the walks after fusion see a DAG, not a tree.

Inlining copies a producer's body at every read of it, and lowering builds equal operands separately: an
integer division's correction steps read the same few values over and over, and a fused uint64 division held
about 2,300 node objects for 113 distinct values. Every pass that memoizes by node identity (index substitution,
folding, summaries, `ir.distinct`) then works once per object; interned, once per value.

Two nodes are made one only when every field is the same: index expressions by identity (expressions are made
once each, and two that compare equal may still differ in their variables' ranges, which simplification reads),
constants by type and text (-0.0 and 0.0 compare equal). A reduction, a GEMM or an attention, and every node
above one, keeps its own object: which reductions a GPU row kernel hoists is told by their identity
(fuse._every_reduction_hoisted), and rename_reductions numbers each object it meets.
"""

from __future__ import annotations

from luminal.compiler.kernels import ir

_KEPT = (ir.Reduce, ir.Contract, ir.Attend)  # never merged, nor anything above them


def interned(v: ir.Value) -> ir.Value:
    """`v` with its equal subtrees (those free of reductions, GEMMs and attention) one object each."""
    return _Interning().value(v)


class _Interning:
    def __init__(self):
        self.made: dict[tuple, ir.Value] = {}  # a node's fields (children as the ids of their interned forms) -> it
        self.done: dict[int, ir.Value] = {}  # id of a node met -> its interned form
        self.met: list[ir.Value] = []  # the nodes met, alive while their ids are keys
        self.kept: set[int] = set()  # ids of interned forms that hold a reduction, GEMM or attention

    def value(self, v: ir.Value) -> ir.Value:
        stack: list[tuple[ir.Value, bool]] = [(v, False)]
        while stack:  # children before parents, without recursion: trees can be deeper than the stack allows
            node, ready = stack.pop()
            if id(node) in self.done:
                continue
            kids = ir.children(node)
            if kids and not ready:
                stack.append((node, True))
                stack.extend((k, False) for k in kids)
                continue
            self.met.append(node)
            self.done[id(node)] = self._one(node, kids)
        return self.done[id(v)]

    def _one(self, node: ir.Value, kids: tuple[ir.Value, ...]) -> ir.Value:
        new_kids = tuple(self.done[id(k)] for k in kids)
        changed = any(a is not b for a, b in zip(new_kids, kids))
        made = ir.with_children(node, new_kids) if changed else node
        key = _key(made, new_kids)
        if key is None or any(id(k) in self.kept for k in new_kids):
            self.kept.add(id(made))
            self.met.append(made)
            return made
        return self.made.setdefault(key, made)


def _key(v: ir.Value, kids: tuple[ir.Value, ...]) -> tuple | None:
    """`v`'s fields, children by identity; None for a node that keeps its own object."""
    children = tuple(map(id, kids))
    if isinstance(v, ir.Load):
        return ir.Load, v.buffer, id(v.index), v.dtype
    if isinstance(v, ir.Apply):
        return ir.Apply, v.op, children, v.dtype
    if isinstance(v, ir.Const):
        return ir.Const, type(v.value), repr(v.value), v.dtype
    if isinstance(v, ir.IndexValue):
        return ir.IndexValue, id(v.expr), v.dtype
    if isinstance(v, ir.Guard):
        return ir.Guard, id(v.valid), children, v.dtype
    if isinstance(v, ir.GatherLoad):
        return ir.GatherLoad, v.buffer, children, id(v.index), id(v.valid), id(v.limit), v.dtype
    return None  # a reduction, GEMM or attention, or a node of another pass's kind
