"""A primitive Graph into an egglog e-graph: one flat `let` per node, never a `let` of a literal.

Insertion rules, from what egglog 13.2.0 does (shared/notes/egglog.md):
- egglog-python let-binds every sub-expression that has two parents in one inserted expression, literals
  included, and egglog corrupts integer arguments read through such literal `let`s (upstream bug; the .egg
  reproduction and `tests/compiler/test_egraph.py` show it). So every node is inserted on its own as
  `let n<id>_ = Op(<let refs>, <literals>)`: a depth-one call whose arguments are references to earlier lets
  and literals. No sub-expression can have two parents, so the Python API creates no `let` of its own.
- egglog 13.2.0 can also store a reference to one `let` as another's whose name it starts (`$n17` as `$n171`,
  search/insertion_check.py). Let names are therefore prefix-free (`n<id>_`), what was stored is checked
  against what was sent, and a graph stored wrongly anyway is inserted again under other names.
- One `let` per node keeps insertion linear; inserting the whole DAG as one nested expression is quadratic.
- View facts go in with `set` actions, which the Python API never rewrites into `let`s.

Identical nodes (same op, parameters, inputs and views) hash-cons into one e-node: the e-graph is the graph
after common-subexpression elimination. Only what the outputs and the signature inputs reach is inserted
(the root lists exactly those), so a graph comes back without its dead nodes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from egglog import EGraph, set_

from luminal import dtypes as dt
from luminal import ops
from luminal.compiler.graph.passes import broadcast_scalar
from luminal.compiler.search import terms as T
from luminal.compiler.search.insertion_check import misinserted
from luminal.graph import Graph, Node
from luminal.symbolic import as_expr
from luminal.view import ShapeTracker, dims_product, provably_le

# Ops whose constructor takes only (input, view) pairs, by op class.
_PLAIN = {
    ops.Log2: T.Log2,
    ops.Exp2: T.Exp2,
    ops.Sin: T.Sin,
    ops.Sqrt: T.Sqrt,
    ops.Recip: T.Recip,
    ops.Add: T.Add,
    ops.Mul: T.Mul,
    ops.Mod: T.Mod,
    ops.LessThan: T.LessThan,
    ops.Gather: T.Gather,
    ops.Scatter: T.Scatter,
}


@dataclass
class Encoding:
    """A graph inside an e-graph, with the Python-side tables its terms refer to by key."""

    egraph: EGraph
    source: Graph
    root: T.Sinks | None = None  # let-bound once every node is in: extraction starts here
    views: list[ShapeTracker] = field(default_factory=list)  # view id -> view
    params: list[ops.Op] = field(default_factory=list)  # parameter key -> op (Input, Weight, Iota)
    terms: dict[int, T.Tensor] = field(default_factory=dict)  # source node id -> its let-bound term
    inserted: dict[str, T.Tensor] = field(default_factory=dict)  # let name -> the depth-one term sent
    root_name: str = "root"  # the root's let name (egglog calls it `$root`)
    _view_ids: dict[str, int] = field(default_factory=dict)
    _param_ids: dict[str, int] = field(default_factory=dict)
    facts_set: int = 0  # views [0, facts_set) have their facts in the e-graph

    def view_id(self, st: ShapeTracker) -> int:
        # Keyed by the exact JSON (history included), so a round trip gives back the very same view.
        key = json.dumps(st.to_json(), sort_keys=True)
        if key not in self._view_ids:
            self._view_ids[key] = len(self.views)
            self.views.append(st)
        return self._view_ids[key]

    def param_id(self, op: ops.Op) -> int:
        key = json.dumps([op.name, op.params()], sort_keys=True, default=str)
        if key not in self._param_ids:
            self._param_ids[key] = len(self.params)
            self.params.append(op)
        return self._param_ids[key]

    def size(self) -> int:
        return egraph_size(self.egraph)


def egraph_size(egraph: EGraph) -> int:
    """E-nodes of the term language in `egraph`."""
    return sum(n for fn, n in egraph.all_function_sizes() if fn in T.CONSTRUCTORS)


def constant_term(op: ops.Constant) -> T.Tensor:
    v, d = op.value, op.dtype
    if d.is_float:
        v = float(v)
        return T.NegZero(d.name) if v == 0.0 and math.copysign(1.0, v) < 0 else T.ConstF(v, d.name)
    return T.ConstI(dt.int64.wrap(int(v)), d.name)  # egglog's i64: uint64's upper half as its bit pattern


def node_term(enc: Encoding, node: Node) -> T.Tensor:
    """The depth-one term of one node: its inputs are the let-bound terms of its producers."""
    op = node.op
    edges = [x for src, st in node.inputs for x in (enc.terms[src], enc.view_id(st))]
    if type(op) in _PLAIN:
        return _PLAIN[type(op)](*edges)
    if isinstance(op, ops.Reduce):
        return (T.SumReduce if isinstance(op, ops.SumReduce) else T.MaxReduce)(*edges, op.axis)
    if isinstance(op, ops.Cast):
        return T.Cast(*edges, op.dtype.name)
    if isinstance(op, ops.Output):
        return T.Output(*edges, op.label)
    if isinstance(op, ops.Weight):
        return T.Weight(op.label, enc.param_id(op))
    if isinstance(op, ops.Input):
        return T.Input(op.label, enc.param_id(op))
    if isinstance(op, ops.Constant):
        return constant_term(op)
    if isinstance(op, ops.Iota):
        return T.Iota(enc.param_id(op))
    raise TypeError(f"encode: no term for op {op.name}")


def _sinks(graph: Graph) -> list[int]:
    """What extraction must give back: every output, and every signature input even if nothing reads it."""
    weights = set(graph.weights.values())
    return list(graph.outputs.values()) + [i for i in graph.inputs.values() if i not in weights]


class EncodingError(RuntimeError):
    """egglog stored the graph's terms wrongly under every naming tried (search/insertion_check.py)."""


NAMINGS = 3  # lets named n<id>_, then a<k>n<id>_: a wrong resolution is tied to names, so others avoid it


def encode(graph: Graph) -> Encoding:
    """Insert `graph` into a new e-graph (one graph per e-graph: the view and parameter tables are its own),
    checked against what egglog stored; inserted again under other let names when something differs."""
    wrong: list[str] = []
    for naming in range(NAMINGS):
        enc = _insert(graph, "" if naming == 0 else f"a{naming}")
        wrong = misinserted(enc.egraph, enc.inserted)
        if not wrong:
            set_view_facts(enc)
            return enc
    raise EncodingError(f"egglog stored these lets differently from what was sent, under every naming: {wrong[:5]}")


def _insert(graph: Graph, prefix: str) -> Encoding:
    enc = Encoding(EGraph(), graph)
    live = _live(graph)
    for node in graph.nodes:
        if node.id in live:
            name = f"{prefix}n{node.id}_"  # ended by `_`: no let's name is the start of another's
            enc.inserted[name] = node_term(enc, node)
            enc.terms[node.id] = enc.egraph.let(name, enc.inserted[name])
    root = T.NoSinks()
    for nid in reversed(_sinks(graph)):
        root = T.Sink(enc.terms[nid], root)  # a chain of distinct cells over distinct lets: nothing shared
    enc.root = enc.egraph.let(enc.root_name, root)
    return enc


def _live(graph: Graph) -> set[int]:
    live, stack = set(), _sinks(graph)
    while stack:
        n = stack.pop()
        if n not in live:
            live.add(n)
            stack.extend(s for s, _ in graph.nodes[n].inputs)
    return live


def set_view_facts(enc: Encoding) -> None:
    """Set the facts of every view that has none yet (rules added after encoding make views too)."""
    facts = []
    k = enc.facts_set
    while k < len(enc.views):  # scalar views join the table as they are made; each needs its facts too
        st = enc.views[k]
        facts.append(set_(T.unpadded(k)).to(bool(st.valid == 1)))
        facts.append(set_(T.scalar_view(k)).to(enc.view_id(broadcast_scalar(st.shape))))
        facts.append(set_(T.identity_view(k)).to(st.is_identity()))
        facts.append(set_(T.axes_read(k)).to(axes_read(st)))
        facts.append(set_(T.base_view(k)).to(enc.view_id(ShapeTracker.contiguous(st.base))))
        facts.append(set_(T.reads_once(k)).to(reads_once(st)))
        k += 1
    enc.facts_set = k
    if facts:
        enc.egraph.register(*facts)


def reads_once(st: ShapeTracker) -> bool:
    """Whether reading through `st` visits no buffer element twice (no broadcast): every axis longer than 1
    moves the index, and the view has no more elements than its buffer. Reshapes, permutes, slices and pads
    pass, expands do not; an index folding two axes onto one element could pass too, which costs time, never
    correctness (what it guards is recomputation: an inlined producer has the same value wherever it is read)."""
    used = st.index.symbols()
    moves = all(f"_i{k}" in used or as_expr(d) == 1 for k, d in enumerate(st.shape))
    return moves and provably_le(dims_product(st.shape), dims_product(st.base))


def axes_read(st: ShapeTracker) -> int:
    """Bit k set when reading through `st` depends on index k (its index or its validity); -1 past 62 axes."""
    if len(st.shape) > 62:
        return -1
    used = st.index.symbols() | st.valid.symbols()
    return sum(1 << k for k in range(len(st.shape)) if f"_i{k}" in used)
