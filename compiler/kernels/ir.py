"""Kernel IR: what every code generator (C for the CPU, CUDA, Metal) consumes.

A kernel computes one output buffer. Its `body` is a value expression evaluated once per output element,
at the element's logical indices `_i0 .. _i{n-1}` (symbolic variables, as in views). Leaves read buffers
through symbolic index expressions, so a fused kernel is just a larger expression: inlining a producer
substitutes the consumer's index arithmetic into the producer's body. Reductions are values too: `Reduce`
loops a fresh variable `_r{k}` over an extent and folds its body, which is how reduce fusion is expressed.

Launch geometry is implied: the output shape is the iteration space (CPU: nested loops, GPU: a grid over
it); symbolic dims stay symbolic until the program runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

from luminal.dtypes import DType
from luminal.symbolic import Expr, as_expr


class Value:
    """A per-element value expression (see the subclasses)."""

    dtype: DType

    def __getstate__(self) -> dict:
        # The cached hash stays behind (string hashes differ between processes), and so does the summary.
        return {k: v for k, v in self.__dict__.items() if k not in ("_hash", "_summary")}


def value_node(cls: type) -> type:
    """A frozen dataclass whose hash is computed once. Values are trees that fusion and the cost model put in
    sets and dicts over and over; the generated hash would walk the whole subtree each time (a quarter of a
    12-layer encoder's compile time)."""
    cls = dataclass(frozen=True)(cls)
    tree_hash = cls.__hash__

    def __hash__(self) -> int:  # noqa: N807 - it is the method
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = tree_hash(self)
            object.__setattr__(self, "_hash", cached)
        return cached

    cls.__hash__ = __hash__
    return cls


@value_node
class Load(Value):
    """buffer[index]; `index` is an Expr over the loop variables and the symbols."""

    buffer: str
    index: Expr
    dtype: DType


@value_node
class GatherLoad(Value):
    """buffer[index(g)] where g = the run-time integer `at`; 0 where valid(g) is 0, an error when out of range."""

    buffer: str
    at: Value
    index: Expr  # over the variable "_g" (the gathered position in the logical source) and the loop variables
    valid: Expr
    limit: Expr  # g must lie in [0, limit): the logical size of the gathered source
    dtype: DType


@value_node
class Const(Value):
    value: float | int | bool
    dtype: DType


@value_node
class IndexValue(Value):
    """The integer value of a symbolic expression of the loop indices (Iota)."""

    expr: Expr
    dtype: DType


@value_node
class Guard(Value):
    """value where `valid` (an Expr of the indices) is non-zero, else 0: padding reads as zero."""

    valid: Expr
    value: Value
    dtype: DType


@value_node
class Apply(Value):
    """A primitive element-wise op (`luminal.ops` name: Log2 .. LessThan, or Cast) of argument values, or one
    of the kernel IR's own (IR_OPS): what lowering makes of a primitive pattern that is element-wise in effect."""

    op: str
    args: tuple[Value, ...]
    dtype: DType


# Element-wise ops with no primitive of their own, by name: their arity (None: any number, at least 3).
IR_OPS: dict[str, int | None] = {
    "Max": 2,  # the larger of two values, nan if either is nan: a max over two or a few values, unrolled
    "Select": None,  # (choice, option_0, .., option_{k-1}): option_choice, choice in [0, k) (where's gather)
}


@value_node
class Reduce(Value):
    """Fold of `body` over `var` in [0, extent): "sum" or "max"."""

    op: str
    var: str
    extent: Expr
    body: Value
    dtype: DType


@value_node
class Contract(Value):
    """sum over `var` in [0, extent) of a * b: the value of one GEMM output element (matmul recognition).

    Equal to Reduce("sum", var, extent, Apply("Mul", (a, b))) and emitted as that where no faster form
    applies; its point is that the operands stay separate, so a code generator can see which output indices
    each operand depends on (A: batch and M indices, B: batch and N indices), pack them into tiles and run
    a register-blocked GEMM with the rest of the kernel body as its epilogue.
    """

    var: str
    extent: Expr
    a: Value
    b: Value
    dtype: DType

    def as_reduce(self) -> Reduce:
        return Reduce("sum", self.var, self.extent, Apply("Mul", (self.a, self.b), self.dtype), self.dtype)


@value_node
class Attend(Value):
    """The value of one attention output element [..., l, n] (attention recognition), scores never stored:

        score(s) = scale * sum over `e_var` in [0, e_extent) of q * k, plus bias
        p(s)     = exp2((score(s) - peak) * log2 e) / (sum of them [+ 1 where that sum is under 0.5, if safe])
        value    = sum over `s_var` in [0, s_extent) of p(s) * v

    with peak the largest score (at least the lowest float32 if safe). `q` is over the output's indices and
    `e_var`, `k` over `s_var` and `e_var`, `v` over `s_var` and the output's, `bias` over `s_var` and the
    output's; none of them reads the axis the others are free of, which is what lets a code generator tile
    it as flash attention does: a block of queries against blocks of keys, with the softmax kept online.
    """

    s_var: str
    s_extent: Expr
    e_var: str
    e_extent: Expr
    q: Value
    k: Value
    v: Value
    bias: Value
    scale: float
    safe: bool
    dtype: DType


@dataclass(frozen=True)
class Buffer:
    name: str
    dtype: DType
    size: Expr  # elements
    # "input", "weight", "temp", "output", "packed" (compiler/cpu/prepack.py), "counters" (cuda/arrivals.py),
    # "derived" (compiler/kernels/derived_weights.py)
    role: str
    label: str = ""  # the input / weight / output name for those roles; a packed or derived buffer's kernel


class _Kernel:
    """What loop and scatter kernels share: the analyses kept on them (`kept`) stay out of their pickles."""

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


@dataclass(frozen=True)
class LoopKernel(_Kernel):
    """out[row-major position of i] = body(i) for every index i of `shape`."""

    name: str
    out: str
    shape: tuple[Expr, ...]
    body: Value


@dataclass(frozen=True)
class ScatterKernel(_Kernel):
    """out = `dest` (evaluated over `shape`), then out[at(j)] = src(j) for every index j of `src_shape`."""

    name: str
    out: str
    shape: tuple[Expr, ...]
    dest: Value
    src_shape: tuple[Expr, ...]
    at: Value  # over the loop variables of src_shape
    src: Value
    limit: Expr


Kernel = LoopKernel | ScatterKernel


@dataclass
class KernelProgram:
    """Kernels in execution order over named buffers, with the signature that binds them to names."""

    buffers: dict[str, Buffer] = field(default_factory=dict)
    kernels: list[Kernel] = field(default_factory=list)
    inputs: dict[str, str] = field(default_factory=dict)  # input name -> buffer
    weights: dict[str, str] = field(default_factory=dict)  # weight name -> buffer
    outputs: dict[str, tuple[str, tuple[Expr, ...]]] = field(default_factory=dict)  # name -> (buffer, shape)
    symbols: dict[str, Expr] = field(default_factory=dict)
    # kernel name -> the library call that computes it in place of generated code ("cublas": a GEMM step of the
    # CUDA launch plan, compiler/cuda/library_gemm.py); what the candidate chose, so artifacts carry it
    library: dict[str, str] = field(default_factory=dict)


# Each node type's children, looked up by its exact type (no class derives from these): walks call this millions
# of times in a compile, and a chain of isinstance checks was most of a walk's time.
_CHILDREN = {
    Apply: lambda v: v.args,
    Guard: lambda v: (v.value,),
    Reduce: lambda v: (v.body,),
    GatherLoad: lambda v: (v.at,),
    Contract: lambda v: (v.a, v.b),
    Attend: lambda v: (v.q, v.k, v.v, v.bias),
}


def children(v: Value) -> tuple[Value, ...]:
    """The value nodes `v` reads directly (an attention's operands included)."""
    of = _CHILDREN.get(type(v))
    return of(v) if of is not None else ()


def with_children(v: Value, kids: tuple[Value, ...]) -> Value:
    """`v` reading `kids` in place of `children(v)`, in that order."""
    if isinstance(v, Apply):
        return replace(v, args=tuple(kids))
    if isinstance(v, Guard):
        return replace(v, value=kids[0])
    if isinstance(v, Reduce):
        return replace(v, body=kids[0])
    if isinstance(v, GatherLoad):
        return replace(v, at=kids[0])
    if isinstance(v, Contract):
        return replace(v, a=kids[0], b=kids[1])
    if isinstance(v, Attend):
        return replace(v, q=kids[0], k=kids[1], v=kids[2], bias=kids[3])
    return v


def rebuilt(v: Value, change) -> Value:
    """`v` with each node for which `change(node)` gives a value replaced by it (outermost first)."""
    new = change(v)
    if new is not None:
        return new
    kids = children(v)
    return with_children(v, tuple(rebuilt(k, change) for k in kids)) if kids else v


class Summary(NamedTuple):
    """What a value tree holds, computed once per node (fusion asks the same trees again and again)."""

    kinds: frozenset[type]  # the node types that occur in it
    buffers: tuple[str, ...]  # the buffers it loads or gathers from, in `walk`'s order of first reading
    size: int  # its nodes counted with repetition, as `walk` yields them


_KINDS: dict[frozenset[type], frozenset[type]] = {}  # one object per set of kinds: most trees share a few


def summary(v: Value) -> Summary:
    """`v`'s Summary, kept on the node (values are immutable). Shared subtrees are summarised once, so this is
    linear in the distinct nodes where a walk is linear in the nodes with repetition."""
    done = v.__dict__.get("_summary")
    if done is not None:
        return done
    stack: list[tuple[Value, bool]] = [(v, False)]
    while stack:  # children before parents, without recursion: trees can be deeper than the stack allows
        node, ready = stack.pop()
        if "_summary" in node.__dict__:
            continue
        kids = children(node)
        if kids and not ready:
            stack.append((node, True))
            stack.extend((k, False) for k in kids)
            continue
        kinds, size = {type(node)}, 1
        found = [node.buffer] if isinstance(node, (Load, GatherLoad)) else []
        for k in kids:
            part = k.__dict__["_summary"]
            kinds |= part.kinds
            found.extend(part.buffers)
            size += part.size
        frozen = frozenset(kinds)
        node_summary = Summary(_KINDS.setdefault(frozen, frozen), tuple(dict.fromkeys(found)), size)
        object.__setattr__(node, "_summary", node_summary)
    return v.__dict__["_summary"]


def holds(v: Value, *kinds: type) -> bool:
    """Whether any node of `v` is one of `kinds`."""
    present = summary(v).kinds
    return any(k in present for k in kinds)


def walk(v: Value):
    """Every value node of an expression tree, parents first (children in `children`'s order)."""
    # A stack, not nested generators: `yield from` costs each node once per enclosing level, and fusion and
    # the cost model walk deep trees millions of times in a compile.
    stack = [v]
    while stack:
        node = stack.pop()
        yield node
        kids = children(node)
        if kids:
            stack.extend(reversed(kids))


def distinct(v: Value, kids=children):
    """Every node object of an expression once, parents first: `walk` without the repetitions of a subtree the
    tree holds in several places (`kids(node)`: the nodes to go on to, `children` unless given). For the
    questions whose answer is a set or an any/all (the buffers a tree reads, its index expressions, whether it
    holds a kind of node), which `walk` would answer once per copy: inlining shares the producer's subtrees,
    and a chain of ops reading their input twice doubles a walk per link."""
    seen: set[int] = set()
    stack = [v]
    while stack:
        node = stack.pop()
        key = id(node)  # the tree keeps every node alive while this runs, so ids stay unique
        if key not in seen:
            seen.add(key)
            yield node
            below = kids(node)
            if below:
                stack.extend(reversed(below))


_ABSENT = object()


def kept(kernel: Kernel, name: str, analysis) -> object:
    """`analysis(kernel)`, computed once per kernel object and kept on it as `name` (kernels are immutable, and a
    changed kernel is a new object): fusion's checks, the cost model, the launch planner and the generators each
    ask for a kernel's GEMM and GEMV plans, over every variant of every candidate that holds the kernel."""
    key = f"_{name}"
    found = kernel.__dict__.get(key, _ABSENT)
    if found is _ABSENT:
        found = analysis(kernel)
        object.__setattr__(kernel, key, found)
    return found


def element_wise(k: Kernel) -> bool:
    """Whether `k` is a loop kernel whose every element is computed on its own (no reduction, GEMM or attention)."""
    return isinstance(k, LoopKernel) and not holds(k.body, Reduce, Contract, Attend)


def buffers_read(k: Kernel) -> set[str]:
    return set(buffers_in_order(k))


def buffers_in_order(k: Kernel) -> list[str]:
    """The buffers a kernel reads, in the order its expressions first read them: the same computation over
    other buffers lists them in the same places, whatever their names."""
    values = [k.body] if isinstance(k, LoopKernel) else [k.dest, k.at, k.src]
    return list(dict.fromkeys(b for v in values for b in summary(v).buffers))


def steps_per_element(v: Value) -> Expr:
    """About how many loop steps one output element costs: 1, times the extent of each reduction it runs.
    A row mean over 384 values is one output element per row but 384 steps; counting elements alone kept
    [8, 128, 1] means on one thread."""
    if isinstance(v, Reduce):
        return v.extent * steps_per_element(v.body)
    if isinstance(v, Contract):
        return v.extent * (steps_per_element(v.a) + steps_per_element(v.b))
    inner = [v.value] if isinstance(v, Guard) else [v.at] if isinstance(v, GatherLoad) else []
    inner += list(v.args) if isinstance(v, Apply) else []
    return sum((steps_per_element(a) for a in inner), as_expr(1)).max(1)
