"""Fusion's size limits: how large a fused kernel's value tree, its index expressions and its reads of one
buffer may grow before fusing stops (the C and CUDA text and every pass over the tree grow with them)."""

from __future__ import annotations

from collections.abc import Iterator

from luminal.compiler.kernels import ir
from luminal.compiler.kernels.settle import is_zero
from luminal.symbolic import Expr

MAX_TREE_NODES = 4096  # a fused body's nodes counted with repetition: what fusion and the code generators walk
# An index expression's nodes counted with repetition. Reading through views whose sizes are symbolic (a
# KV cache's position) leaves div/mod the simplifier cannot fold, and each inlining nests them once more:
# unbounded, a decoder step's indexes grew past a million nodes within a few fusions.
MAX_INDEX_NODES = 512
# Distinct positions a fused kernel reads of one buffer. Inlining a producer read at r positions copies its body r
# times; a scan's doubling steps fused double that count per step, into straight-line sums of thousands of loads
# (a cumsum over 4096 rows: 121 KB of CUDA, three seconds of NVRTC per architecture) where separate steps do the
# same work in a few small kernels. A convolution's window (up to 8 x 8) still fuses.
MAX_READS_PER_BUFFER = 64


def _within(root, children, limit: int) -> bool:
    """Whether the tree under `root` (`children(node)` its subtrees), shared subtrees counted each time they
    occur, has at most `limit` nodes. Stops counting at the limit."""
    stack, count = [root], 0
    while stack:
        node = stack.pop()
        count += 1
        if count > limit:
            return False
        stack.extend(children(node))
    return True


def _expr_children(node: Expr) -> list:
    return [a for a in node.args if isinstance(a, Expr)]


def _indexes(v: ir.Value) -> Iterator[Expr]:
    for n in ir.distinct(v):
        if isinstance(n, ir.Load):
            yield n.index
        elif isinstance(n, ir.GatherLoad):
            yield from (n.index, n.valid, n.limit)
        elif isinstance(n, ir.Guard):
            yield n.valid
        elif isinstance(n, ir.IndexValue):
            yield n.expr


def tree_within(v: ir.Value, limit: int = MAX_TREE_NODES) -> bool:
    """Whether the value tree has at most `limit` nodes, repeated subtrees counted each time. The cost model
    counts a repeated subtree once, and so does the C text (codegen_c binds it to a local), but the tree itself
    holds each copy (inlining substitutes the producer at every read): a chain of ops that each read their
    input twice would double it per link, and every pass over it with it."""
    return ir.summary(v).size <= limit


def too_large_inlined(producer: ir.LoopKernel, consumer: ir.LoopKernel, limit: int = MAX_TREE_NODES) -> bool:
    """Whether `inline(producer, consumer)` surely holds more than `limit` nodes, counted without building it.

    Each load of the producer's buffer that inlining replaces becomes a copy of the producer's body, as large as
    the body unless settling shrinks it, which only a guard decided at the read's index (or an `x + 0` it leaves)
    does. For a body with neither, the count is exact; otherwise this says False and the caller builds and
    counts. A consumer that reads a producer at a thousand offsets (a scan's doubling steps fused) is refused
    here in one bounded walk instead of after a thousand substitutions."""
    body = list(ir.walk(producer.body))
    if any(isinstance(n, ir.Guard) or (isinstance(n, ir.Apply) and n.op == "Add" and any(map(is_zero, n.args)))
           for n in body):  # fmt: skip
        return False
    stack, count = [consumer.body], 0
    while stack:
        node = stack.pop()
        if isinstance(node, ir.Load) and node.buffer == producer.out:
            count += len(body)
        else:
            count += 1
            # A Contract's operands are not inlined into (see _replace_loads): its loads stay loads.
            stack.extend(ir.children(node))
        if count > limit:
            return True
    return False


def within_limits(fused: ir.LoopKernel) -> bool:
    """Whether a fused kernel holds at most one GEMM (whose epilogue is the rest of the kernel) and has bounded
    C text: its value tree, each of its index expressions, and the positions it reads of each buffer."""
    # The sizes first: counting stops at the limit, where finding the GEMMs walks the whole tree.
    return value_within_limits(fused.body) and reads_within(fused.body) and len(contracts(fused.body)) <= 1


def reads_within(v: ir.Value, limit: int = MAX_READS_PER_BUFFER) -> bool:
    """Whether the tree reads each buffer at most at `limit` distinct positions."""
    seen: dict[str, set[Expr]] = {}
    for n in ir.distinct(v):
        if isinstance(n, ir.Load):
            positions = seen.setdefault(n.buffer, set())
            positions.add(n.index)
            if len(positions) > limit:
                return False
    return True


def value_within_limits(v: ir.Value) -> bool:
    """Whether a value tree and each of its index expressions are within fusion's size limits."""
    if not tree_within(v):
        return False
    return all(map(_index_within, set(_indexes(v))))


# Index expressions known to be within MAX_INDEX_NODES. Every candidate fused asks again of the index expressions
# its kernels already had (a fused kernel keeps its consumer's), and counting them was a tenth of fusion's time.
# An expression's size does not depend on its variables' ranges, which equality leaves out.
_SMALL_INDEXES: set[Expr] = set()
_SMALL_INDEXES_MAX = 100_000


def _index_within(e: Expr) -> bool:
    if e in _SMALL_INDEXES:
        return True
    if not _within(e, _expr_children, MAX_INDEX_NODES):
        return False
    if len(_SMALL_INDEXES) >= _SMALL_INDEXES_MAX:
        _SMALL_INDEXES.clear()
    _SMALL_INDEXES.add(e)
    return True


def contracts(v: ir.Value) -> set[ir.Contract]:
    """The distinct Contracts in `v` (equal copies, from reading one GEMM element twice, count once)."""
    if not ir.holds(v, ir.Contract):
        return set()
    return {n for n in ir.distinct(v) if isinstance(n, ir.Contract)}
