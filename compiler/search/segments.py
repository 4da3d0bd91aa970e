"""Layer segmentation: the graph cut where only its residual stream is live, each distinct segment searched once.

The layers of a transformer are the same computation over different weights. Searching the whole graph
encodes, saturates and extracts every layer again; cut into segments, the layers' segments are equal up to
which weights and which earlier values they read, so one of each kind is searched and its extracted forms
are spliced in for all of them.

Where to cut: after a node `n` (in the graph's order) when `n` is the only value computed so far that is
still to be read, apart from long-lived ones, and at least two nodes read it. In a transformer that is the
stream after each norm: after the attention half and after the feed-forward half of every layer.
- Long-lived values (computed once and read across a quarter of the graph or more, like an attention mask)
  are read by many segments; counting them would leave no cut at all. They become segment parameters.
- A run-time input counts as live from its first reader to its last (the first layer's residual is the
  input itself), so the first layer cuts where the others do.
- Rewrites only see one segment, so cuts must fall where no rule's pattern spans them. The second reader
  keeps a cut out of a chain: after `x * w` of a projection nothing else may be live, but cutting there
  would split the expand·mul·sum pattern the matmul rules match. A softmax is the exception among values
  with two readers: its scores (read by the row max) and their exponentials are inside the pattern attention
  recognition matches whole, so no cut follows them.
- A value read by element-wise ops only is one the fusion rules let its readers compute (a norm's centred
  input, read by the square and by the scaling): cut there it would be stored instead, so no cut follows it.
  The residual stream is also read by a reduction (the next norm's mean), and is stored anyway.

A segment's parameters (what it reads from outside: earlier values, inputs and weights) become the inputs
and weights of a small graph, `p{k}` and `w{k}` in order of first reading; its values read later become
outputs `o{k}`. Constants and iotas are copied in, so they are part of what makes two segments equal.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal import ops
from luminal.compiler.graph.rebuild import Rebuilder
from luminal.graph import Graph
from luminal.view import ShapeTracker

LONG_LIVED = 0.25  # of the graph's computing nodes: a value read this far from where it is computed
_COPIED = (ops.Constant, ops.Iota)  # leaves copied into each segment's graph
_LEAVES = (ops.Input, *_COPIED)  # ops.Weight is an ops.Input
_ELEMENTWISE = (ops.Unary, ops.Binary, ops.Cast)


@dataclass(frozen=True)
class Segment:
    nodes: tuple[int, ...]  # its nodes, in the graph's order
    params: tuple[int, ...]  # what it reads from outside: earlier nodes, inputs and weights, by first reading
    outputs: tuple[int, ...]  # its nodes read after it or by a graph output
    key: tuple  # equal keys: the same computation over different parameters


def cut(graph: Graph) -> list[Segment]:
    """The graph's computing nodes (all but leaves and outputs) in consecutive segments; one when nothing cuts."""
    body = [n.id for n in graph.nodes if not isinstance(n.op, (*_LEAVES, ops.Output))]
    if not body:
        return []
    position = {nid: k for k, nid in enumerate(body)}
    readers = graph.consumers()
    end = len(body)  # a graph output reads a value after every node
    last = [max((position.get(r, end) for r in readers[nid]), default=k) for k, nid in enumerate(body)]
    long_lived = [last[k] - k >= LONG_LIVED * len(body) for k in range(len(body))]
    # A run-time input is live from its first reader to its last, like a value computed there (the first
    # layer's residual is the input itself); weights, constants and iotas are never counted.
    born, dying = [0] * (end + 1), [0] * (end + 1)
    spans = [(k, last[k]) for k in range(len(body)) if not long_lived[k]]
    for nid in graph.inputs.values():
        reads = sorted(position.get(r, end) for r in readers[nid])
        if reads and reads[-1] - reads[0] < LONG_LIVED * len(body):
            spans.append((reads[0], reads[-1]))
    for first, final in spans:
        if final > first:
            born[first] += 1
            dying[final] += 1
    live, running = [], 0  # live[k]: values counted above that were made by node k or before and are read after it
    for k in range(len(body)):
        running += born[k] - dying[k]
        live.append(running)
    cuts = [
        k
        for k in range(len(body) - 1)
        if live[k] == 1 and last[k] > k and not long_lived[k] and _may_cut_after(graph, body[k], readers)
    ]
    segments, start = [], 0
    for k in [*cuts, len(body) - 1]:
        segments.append(_segment(graph, body[start : k + 1], readers, position, end))
        start = k + 1
    return segments


def _may_cut_after(graph: Graph, nid: int, readers: dict[int, list[int]]) -> bool:
    """Whether a cut after `nid` leaves every rule's pattern whole: it has two readers or more (a chain is
    where patterns lie), and it is not inside a softmax, which attention recognition matches whole: neither
    the scores (read by the row max) nor their exponentials."""
    node = graph.nodes[nid]
    reads = {graph.nodes[r].op.__class__ for r in set(readers[nid])}
    if all(issubclass(op, _ELEMENTWISE) for op in reads):
        return False  # fusion computes such a value in its readers; a cut would store it
    return len(set(readers[nid])) >= 2 and ops.MaxReduce not in reads and not isinstance(node.op, ops.Exp2)


def _segment(graph: Graph, nodes: list[int], readers: dict[int, list[int]], position: dict, end: int) -> Segment:
    inside = {nid: k for k, nid in enumerate(nodes)}
    params: dict[int, int] = {}
    described = []
    for nid in nodes:
        node = graph.nodes[nid]
        refs = []
        for src, view in node.inputs:
            if src in inside:
                refs.append(("node", inside[src], view))
            elif isinstance(graph.nodes[src].op, _COPIED):
                refs.append(("leaf", repr(graph.nodes[src].op), view))
            else:
                refs.append(("param", params.setdefault(src, len(params)), view))
        described.append((repr(node.op), tuple(refs)))
    last_position = position[nodes[-1]]
    outputs = tuple(nid for nid in nodes if any(position.get(r, end) > last_position for r in readers[nid]))
    signature = tuple((isinstance(graph.nodes[p].op, ops.Weight), _typed(graph, p)) for p in params)
    key = (signature, tuple(described), tuple(inside[o] for o in outputs))
    return Segment(tuple(nodes), tuple(params), outputs, key)


def _typed(graph: Graph, nid: int) -> tuple:
    node = graph.nodes[nid]
    return tuple(node.shape), node.dtype.name


def repeated(segments: list[Segment]) -> bool:
    """Whether cutting saves work: some segment's computation occurs twice."""
    return len({s.key for s in segments}) < len(segments)


def segment_graph(graph: Graph, seg: Segment) -> Graph:
    """The segment alone: parameters as inputs `p{k}` (weights as weights `w{k}`), values read later as `o{k}`."""
    g = Graph()
    g.symbols = dict(graph.symbols)
    local: dict[int, int] = {}
    for k, p in enumerate(seg.params):
        node = graph.nodes[p]
        if isinstance(node.op, ops.Weight):
            local[p] = g.add(ops.Weight(f"w{k}", node.shape, node.dtype)).id
            g.weights[f"w{k}"] = local[p]
        else:
            local[p] = g.add(ops.Input(f"p{k}", node.shape, node.dtype)).id
            g.inputs[f"p{k}"] = local[p]
    for nid in seg.nodes:
        node = graph.nodes[nid]
        for src, _ in node.inputs:
            if src not in local:  # a constant or iota
                local[src] = g.add(graph.nodes[src].op).id
        local[nid] = g.add(node.op, [(local[src], view) for src, view in node.inputs]).id
    for k, o in enumerate(seg.outputs):
        g.outputs[f"o{k}"] = g.add(ops.Output(f"o{k}"), [(local[o], ShapeTracker.contiguous(graph.nodes[o].shape))]).id
    return g


def assemble(graph: Graph, segments: list[Segment], searched: dict[tuple, Graph]) -> Graph:
    """`graph` with every segment replaced by the searched form of its kind (`searched[segment.key]`, a graph
    with the signature `segment_graph` gives), read with this segment's parameters."""
    rb = Rebuilder(graph)
    ending = {seg.nodes[-1]: seg for seg in segments}
    inside = {nid for seg in segments for nid in seg.nodes}
    for node in graph.nodes:
        if node.id in ending:
            _splice(rb, graph, ending[node.id], searched[ending[node.id].key])
        elif node.id not in inside and not isinstance(node.op, ops.Output):
            rb.copy(node)  # a leaf
    for node in graph.nodes:
        if isinstance(node.op, ops.Output):  # last: one may read a segment that ends after it
            rb.copy(node)
    return rb.finish()


def _splice(rb: Rebuilder, graph: Graph, seg: Segment, form: Graph) -> None:
    local: dict[int, tuple[int, ShapeTracker | None]] = {}  # form's node -> (assembled node, view over it)

    def read(src: int, view: ShapeTracker) -> tuple[int, ShapeTracker]:
        new, through = local[src]
        return new, view if through is None else through.then(view)

    for node in form.nodes:
        if isinstance(node.op, ops.Input):  # p{k} or w{k}: the k-th parameter, already in the assembled graph
            local[node.id] = rb.alias[seg.params[int(node.op.label[1:])]]
        elif isinstance(node.op, ops.Output):
            rb.alias_to(graph.nodes[seg.outputs[int(node.op.label[1:])]], *read(*node.inputs[0]))
        else:
            local[node.id] = (rb.new.add(node.op, [read(s, v) for s, v in node.inputs]).id, None)
