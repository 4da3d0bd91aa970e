"""Attention recognition: softmax(q·kᵀ·scale + bias)·v as one `Attention` alternative, the scores never a buffer.

The pattern spans a dozen primitive nodes and as many views: two expand·mul·sum contractions, the scale, an
optional additive mask, and the softmax between them. egglog sees views only as opaque ids, so the match is
made here, over the graph the search encodes, and what it finds goes into the e-graph as a union: the
`Attention` term joins the e-class of the output contraction, beside the primitive form, and extraction's
cost model chooses between them like any other alternative (search/costs.py).

The softmax is matched against a template: what `luminal.hl` builds for a softmax over the scores' shape (the
masked-row-safe one of `scaled_dot_product_attention`, or the plain `softmax(x, -1)`), put through the same
deterministic passes, compared node for node and view for view. A graph that spells softmax another way is
not matched, and keeps its primitive form: a miss costs speed, never correctness.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from egglog import union

from luminal import dtypes as dt
from luminal import ops
from luminal.compiler.analysis.attention_plan import fits
from luminal.compiler.graph.passes import PASSES, broadcast_scalar
from luminal.compiler.search import terms as T
from luminal.compiler.search.encode import Encoding, axes_read
from luminal.graph import Graph, Node
from luminal.symbolic import Expr, as_expr
from luminal.view import ShapeTracker

Edge = tuple[int, ShapeTracker]  # (source node id, the view it is read through)


@dataclass(frozen=True)
class Match:
    out: int  # the node whose e-class gets the alternative (the P·V contraction)
    q: Edge  # read as [..., L, S, E]
    k: Edge  # read as [..., L, S, E]
    v: Edge  # read as [..., L, N, S]
    bias: Edge | None  # read as [..., L, S]
    scale: float
    safe: bool


def _same_view(a: ShapeTracker, b: ShapeTracker) -> bool:
    """Whether two views read the same elements: equal shapes and equal simplified index and validity."""
    return tuple(a.shape) == tuple(b.shape) and a.index == b.index and a.valid == b.valid


def _scalar_constant(graph: Graph, edge: Edge) -> float | None:
    node = graph.nodes[edge[0]]
    if isinstance(node.op, ops.Constant) and node.shape == () and node.dtype == dt.float32:
        return float(node.op.value)
    return None


def _contraction(graph: Graph, node: Node) -> tuple[Edge, Edge] | None:
    """(a, b) when `node` is SumReduce over its last axis of Mul(a, b), the product read whole and in order."""
    if not isinstance(node.op, ops.SumReduce) or node.dtype != dt.float32:
        return None
    (src, view) = node.inputs[0]
    product = graph.nodes[src]
    if node.op.axis != len(view.shape) - 1 or not isinstance(product.op, ops.Mul):
        return None
    if not view.is_identity():
        return None
    a, b = product.inputs
    return a, b


def _reads_axis(view: ShapeTracker, axis: int) -> bool:
    assert axis >= 0, axis
    mask = axes_read(view)
    return mask < 0 or bool(mask >> axis & 1)


# ---- the softmax template -------------------------------------------------------------------------------


def _variable_ranges(e: Expr, found: set) -> set:
    """Each variable of expression `e` as (name, lo, hi), added to `found`."""
    if e.op == "var":
        found.add((e.args[0], e.lo, e.hi))
    for a in e.args:
        if isinstance(a, Expr):
            _variable_ranges(a, found)
    return found


def _template_for(shape: tuple, safe: bool) -> tuple[Graph, int, int]:
    """The template for scores of `shape`. Expressions compare equal whatever their variables' ranges, which the
    passes read (a sequence of at most 8 and one of at most 16 are the same `seq`): the ranges are part of the key,
    or a template built for one model's ranges would be reused, and fail to match, for another's."""
    ranges: set = set()
    for d in shape:
        _variable_ranges(as_expr(d), ranges)
    return _template(shape, tuple(sorted(ranges)), safe)


@lru_cache(maxsize=64)
def _template(shape: tuple, ranges: tuple, safe: bool) -> tuple[Graph, int, int]:
    """(graph, the scores input's id, the probabilities' id): hl's softmax over the last axis, after the passes
    (`ranges`: the variables' ranges in `shape`, a key only)."""
    from luminal.hl import attention, normalization

    g = Graph()
    x = g.input("scores", shape)
    p = attention._safe_softmax(x) if safe else normalization.softmax(x, -1)
    p.output("p")
    for _, run_pass in PASSES:
        g = run_pass(g)
    out = g.nodes[g.outputs["p"]]
    (p_id, p_view) = out.inputs[0]
    if not p_view.is_identity():
        raise AssertionError("the softmax template's output is a view")  # hl changed: the template needs updating
    return g, g.inputs["scores"], p_id


def _same_op(a: ops.Op, b: ops.Op) -> bool:
    return type(a) is type(b) and a.params() == b.params()


def _matches_template(graph: Graph, p: int, scores: int, safe: bool) -> bool:
    """Whether node `p` of `graph` is the softmax of node `scores` that hl builds, node for node."""
    s = graph.nodes[scores]
    try:
        tg, t_in, t_out = _template_for(tuple(s.shape), safe)
    except Exception:  # a shape the template cannot be built for is no match
        return False
    pairs: dict[int, int] = {t_in: scores}
    stack = [(t_out, p)]
    while stack:
        t, a = stack.pop()
        if t in pairs:
            if pairs[t] != a:
                return False
            continue
        tn, an = tg.nodes[t], graph.nodes[a]
        if t == t_in or not _same_op(tn.op, an.op) or tn.dtype != an.dtype or tuple(tn.shape) != tuple(an.shape):
            return False
        if len(tn.inputs) != len(an.inputs):
            return False
        pairs[t] = a
        for (ts, tv), (as_, av) in zip(tn.inputs, an.inputs):
            if not _same_view(tv, av):
                return False
            stack.append((ts, as_))
    return True


def _softmax_scores(graph: Graph, p: int) -> tuple[int, bool] | None:
    """(the scores node, safe) when node `p` is hl's softmax of them over the last axis."""
    node = p
    for _ in range(4):  # Mul(e, recip) <- Exp2 <- Mul(x, log2 e) <- Add(scores, -peak): the first inputs
        inputs = graph.nodes[node].inputs
        if not inputs:
            return None
        node = inputs[0][0]
    for safe in (True, False):
        if _matches_template(graph, p, node, safe):
            return node, safe
    return None


# ---- the whole pattern ----------------------------------------------------------------------------------


def _scores(graph: Graph, node: int) -> tuple[Edge, Edge, float, Edge | None] | None:
    """(q, k, scale, bias) when `node` is [Add(] [Mul(] q·k [, scale)] [, bias)]."""
    n = graph.nodes[node]
    bias = None
    if isinstance(n.op, ops.Add):
        (a, av), bias = n.inputs
        if not av.is_identity() or graph.nodes[bias[0]].dtype != dt.float32:
            return None
        n = graph.nodes[a]
    scale = 1.0
    if isinstance(n.op, ops.Mul):
        for raw, c in (n.inputs, n.inputs[::-1]):
            value = _scalar_constant(graph, c)
            if value is not None and raw[1].is_identity():
                scale, n = value, graph.nodes[raw[0]]
                break
        else:
            return None
    found = _contraction(graph, n)
    if found is None:
        return None
    q, k = found
    rank = len(q[1].shape)  # [..., L, S, E]
    if rank < 3:
        return None
    for a, b in ((q, k), (k, q)):
        if not _reads_axis(a[1], rank - 2) and not _reads_axis(b[1], rank - 3):
            return a, b, scale, bias
    return None


def find(graph: Graph) -> list[Match]:
    """Every attention in `graph`: a contraction P·V whose P is a softmax of scores q·k (scaled, masked)."""
    found = []
    for node in graph.nodes:
        pv = _contraction(graph, node)
        if pv is None:
            continue
        rank = len(pv[0][1].shape)  # [..., L, N, S]
        if rank < 3:
            continue
        for (p, pview), v in (pv, pv[::-1]):
            p_node = graph.nodes[p]
            if len(p_node.shape) != rank - 1 or _reads_axis(v[1], rank - 3):
                continue
            lead, n = tuple(p_node.shape[:-1]), pview.shape[-2]
            expected = ShapeTracker.contiguous(p_node.shape).reshape((*lead, 1, p_node.shape[-1]))
            if not _same_view(pview, expected.expand((*lead, n, p_node.shape[-1]))):
                continue
            softmax = _softmax_scores(graph, p)
            scores = softmax and _scores(graph, softmax[0])
            if scores and fits(as_expr(scores[0][1].shape[-1]), as_expr(n)):
                q, k, scale, bias = scores
                found.append(Match(node.id, q, k, v, bias, scale, softmax[1]))
                break
    return found


def add_alternatives(enc: Encoding) -> int:
    """Union an `Attention` term into the e-class of every attention output of the encoded graph."""
    graph, added = enc.source, 0
    for m in find(graph):
        if not all(e[0] in enc.terms for e in (m.q, m.k, m.v) + ((m.bias,) if m.bias else ())):
            continue
        if m.out not in enc.terms:
            continue
        bias = (enc.terms[m.bias[0]], m.bias[1]) if m.bias else _zero_bias(m)
        edges = [x for src, st in (m.q, m.k, m.v) for x in (enc.terms[src], enc.view_id(st))]
        edges += [bias[0], enc.view_id(bias[1])]
        term = T.Attention(*edges, float(m.scale), int(m.safe))
        enc.egraph.register(union(enc.terms[m.out]).with_(term))
        added += 1
    return added


def _zero_bias(m: Match) -> tuple[T.Tensor, ShapeTracker]:
    """No mask: a float32 zero broadcast to the scores (adding +0.0 leaves every score as it is)."""
    return T.ConstF(0.0, dt.float32.name), broadcast_scalar(m.q[1].shape[:-1])
