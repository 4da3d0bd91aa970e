"""An e-graph back into a Graph: choose one e-node per e-class, then re-record the choice via `Graph.add`.

What egglog 13.2.0 offers for reading an e-graph back, checked against the installed package:
- `EGraph.extract(expr)`: Rust extraction with tree costs (constructor cost 1 unless `cost=` or `set_cost`).
  The Python API then converts the extracted term DAG into Python expressions *recursively* (a RecursionError
  past a depth of a few hundred ops) and its expressions compare with `==` as egglog facts, so they cannot be
  memoized in a dict. We therefore run the same Rust `extract` command on the underlying bindings e-graph and
  walk its `TermDag` (integer term ids, shared subterms) ourselves: `extract_best`. Tree costs count a shared
  sub-term once per use and are saturating u64s: our transformer blocks multiply the root's cost by ~10^4
  each, so from 5 blocks in one e-graph the cost saturates (choices become arbitrary) or egglog panics
  (`Option::unwrap()` in extract.rs). `extract_best` raises `ExtractionError` for both.
- `EGraph.freeze()` (since 13.1): a snapshot of every e-class with all its e-nodes (`decl.e_classes`: value ->
  calls whose arguments are literals or e-class values), the top-level lets (`decl.let_bindings`) and function
  values (`decl.sets`). `extract_frozen` chooses e-nodes from it in Python with any cost function; costs are
  Python ints, so tree costs cannot saturate as egglog's u64 costs do on deep residual graphs.
- `bindings.EGraph.serialize(...)` gives the visualizer's JSON: string node ids, literals as their printed
  text, f64 costs (optionally truncated per function). `extract_multiple` gives variants that differ only at
  the root. Neither is used here.
- The text command `(extract ...)` runs egglog-experimental's cost-table extractor, not the core one, and a
  panic inside it leaves `extract` unregistered for the rest of the e-graph's life; `extract_best` sends the
  core `Extract` command object, as `EGraph.extract` does when no cost tables are set.

Both paths share `_rebuild`: constructors decode to ops by name, literals back to parameters, view ids back to
the Encoding's ShapeTrackers, and a `View` term becomes an alias, so consumers read through composed views.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from egglog import bindings

from luminal import dtypes as dt
from luminal import ops
from luminal.compiler.graph.fused_ops import FUSED_OPS
from luminal.compiler.graph.rebuild import Rebuilder
from luminal.compiler.search.encode import Encoding
from luminal.graph import Graph, Node


class ExtractionError(RuntimeError):
    """egglog's extraction failed or its cost overflowed; `extract_frozen` or smaller segments avoid it."""


_U64_MAX = 2**64 - 1  # egglog's saturated cost


@dataclass(frozen=True)
class Ref:
    """An argument that is another term (an e-class, or a term id of an extracted DAG)."""

    key: Any


# A chosen e-node: constructor name and its arguments (`Ref`s and literal Python values).
Choice = tuple[str, tuple]


def _decode(enc: Encoding, name: str, params: list) -> ops.Op:
    """The op of a constructor, from its literal (non-edge) arguments."""
    if name in ("Input", "Weight", "Iota"):
        return enc.params[params[-1]]
    if name == "ConstF":
        return ops.Constant(float(params[0]), dt.dtype_of(params[1]))
    if name == "NegZero":
        return ops.Constant(-0.0, dt.dtype_of(params[0]))
    if name == "ConstI":
        dtype = dt.dtype_of(params[1])
        return ops.Constant(bool(params[0]) if dtype == dt.bool_ else dtype.wrap(int(params[0])), dtype)
    if name in ("SumReduce", "MaxReduce"):
        return ops.BY_NAME[name](axis=params[0])
    if name == "Cast":
        return ops.Cast(dtype=dt.dtype_of(params[0]))
    if name == "Output":
        return ops.Output(label=params[0])
    if name in FUSED_OPS:
        return FUSED_OPS[name](*params)
    return ops.BY_NAME[name]()


def _post_order(root: Any, choice: Callable[[Any], Choice]) -> list[Any]:
    """Keys reachable from `root`, producers first (iterative: graphs are deeper than Python's stack)."""
    order, done, stack = [], set(), [(root, False)]
    while stack:
        key, expanded = stack.pop()
        if key in done:
            continue
        if expanded:
            done.add(key)
            order.append(key)
            continue
        stack.append((key, True))
        _, args = choice(key)
        stack.extend((a.key, False) for a in reversed(args) if isinstance(a, Ref) and a.key not in done)
    return order


def _split(enc: Encoding, args: tuple) -> tuple[list, list]:
    """(edges as (producer key, view), parameters): every term argument is followed by its view id."""
    edges, params, k = [], [], 0
    while k < len(args):
        if isinstance(args[k], Ref):
            edges.append((args[k].key, enc.views[args[k + 1]]))
            k += 2
        else:
            params.append(args[k])
            k += 1
    return edges, params


def _rebuild(enc: Encoding, root: Any, choice: Callable[[Any], Choice]) -> Graph:
    rb = Rebuilder(enc.source)  # names, symbols and bound weights carry over from the source graph
    for key in _post_order(root, choice):
        name, args = choice(key)
        if name in ("Sink", "NoSinks"):
            continue
        edges, params = _split(enc, args)
        if name == "View":
            rb.alias[key] = rb.resolve(*edges[0])
            continue
        op = _decode(enc, name, params)
        # Rebuilder.copy reads only the op and the id (our key) of the node it is given.
        rb.copy(Node(key, op, (), (), None), [rb.resolve(src, view) for src, view in edges])
    return rb.finish()


# ---- Rust extraction ------------------------------------------------------------------------------------


def _literal(lit: Any) -> Any:
    return lit.value  # bindings.Int / Float / String / Bool all carry `.value`


def extract_best(enc: Encoding) -> Graph:
    """egglog's own extraction of the whole graph: least tree cost, every constructor 1 except `View` (0)."""
    egg = enc.egraph._egraph  # the bindings e-graph: its TermDag keeps sharing and integer ids (see above)
    here = bindings.RustSpan(__file__, 0, 0)
    command = bindings.Extract(here, bindings.Var(here, f"${enc.root_name}"), bindings.Lit(here, bindings.Int(0)))
    try:
        (best,) = egg.run_program(command)
    except BaseException as e:  # pyo3 panics derive from BaseException
        if type(e).__name__ != "PanicException":
            raise
        raise ExtractionError(f"egglog's extraction panicked ({e}); its tree cost overflows on deep graphs") from e
    if best.cost >= _U64_MAX:
        raise ExtractionError("egglog's tree cost saturated u64, so its choices are arbitrary: extract per segment")
    dag = best.termdag

    def choice(term_id: int) -> Choice:
        term = dag.get(term_id)
        args = []
        for a in term.args:
            child = dag.get(a)
            args.append(Ref(a) if isinstance(child, bindings.TermApp) else _literal(child.value))
        return term.name, tuple(args)

    return _rebuild(enc, best.term, choice)


# ---- reading the e-graph ourselves ---------------------------------------------------------------------


def unit_cost(name: str, params: list) -> int:
    """Every op costs 1, views and the root list cost nothing: the fewest ops (counted as a tree)."""
    return 0 if name in ("View", "Sink", "NoSinks") else 1


def frozen_choices(enc: Encoding) -> tuple[Any, dict[Any, list[Choice]]]:
    """(root e-class, e-class -> its e-nodes) from `EGraph.freeze()`, subsumed e-nodes left out."""
    frozen = enc.egraph.freeze().decl
    subsumed = {call for _, call in frozen.subsumed}
    classes: dict[Any, list[Choice]] = {}
    for value, (_, calls) in frozen.e_classes.items():
        classes[value] = [
            (call.callable.ident.name, tuple(_frozen_arg(a.expr) for a in call.args))
            for call in calls
            if call not in subsumed
        ]
    return frozen.let_bindings[f"${enc.root_name}"].expr.value, classes


def _frozen_arg(expr: Any) -> Any:
    # A child e-class arrives as a ValueDecl of an egglog Value, a literal as a LitDecl of a Python value.
    return Ref(expr.value) if isinstance(expr.value, bindings.Value) else expr.value


def longest_path(costs: list) -> float:
    """Children's costs combined as the costliest one: with `cost`, a longest-path (critical-path) cost.

    A tree cost (the sum) counts a shared producer once per use; on a residual network it grows by an order
    of magnitude per layer, and from a few layers on float rounding swamps the differences between the
    alternatives of one e-class. The longest path grows linearly with depth, and alternatives over the same
    children (MatMul against SumReduce of Mul) still differ by exactly their own costs.
    """
    return max(costs, default=0.0)


def extract_frozen(enc: Encoding, cost: Callable[[str, list], float] = unit_cost, combine: Callable = sum) -> Graph:
    """Choose, per e-class, the e-node of least cost under `cost`: own cost plus `combine` of its children's."""
    root, classes = frozen_choices(enc)
    best = choose(classes, cost, combine)
    return _rebuild(enc, root, lambda cls: best[cls][-1])


def extract_then_fuse(
    enc: Encoding, cost: Callable[[str, list], float], combine: Callable = sum, choices: Any = None
) -> Graph:
    """Extraction in two steps, as the rules run in two phases: first what each e-class computes, chosen with
    no `Inline` at all (MatMul or sum of products, Attention or the softmax spelled out, by the cost of each
    as stored kernels); then, with those choices fixed, which producers their readers compute (the e-nodes
    that differ from the first choice only by reading an `Inline` of a child where it read the child).

    In one step an Inline's saving (a store and a launch) would also decide between structurally different
    alternatives, while the kernel IR declines part of the fusion it assumes (a reduction read by several
    kernels): on a decoder step, spelled-out attention won on savings it never got.

    `choices`: `frozen_choices(enc)` where the caller has it (search/saturated.py reads it once per e-graph).
    """
    root, classes = choices or frozen_choices(enc)
    first = choose(classes, _without_inline(cost), combine)
    inlined = {cls: nodes[0][1][0].key for cls, nodes in classes.items() if nodes and nodes[0][0] == "Inline"}

    def plain(node: Choice) -> Choice:
        name, args = node
        return name, tuple(Ref(inlined.get(a.key, a.key)) if isinstance(a, Ref) else a for a in args)

    fixed = {
        cls: nodes if cls not in first or cls in inlined else [n for n in nodes if plain(n) == first[cls][-1]]
        for cls, nodes in classes.items()
    }
    best = choose(fixed, cost, combine)
    return _rebuild(enc, root, lambda cls: best[cls][-1])


def _without_inline(cost: Callable[[str, list], float]) -> Callable[[str, list], float]:
    def plain_cost(name: str, params: list) -> float:
        return math.inf if name == "Inline" else cost(name, params)

    return plain_cost


def _literals(args: tuple) -> list:
    return [a for a in args if not isinstance(a, Ref)]


def choose(
    classes: dict[Any, list[Choice]], cost: Callable[[str, list], float], combine: Callable = sum
) -> dict[Any, tuple[float, float, Choice]]:
    """Least-cost e-node per e-class: a worklist fixpoint (costs only fall; cycles never win).

    Each e-class gets (cost, tree cost, e-node). The cost is own cost plus `combine` of the children's; the tree
    cost (own plus the sum) breaks its ties, so under a longest-path cost a cheaper alternative off the
    critical path still wins. An `Inline(x)` costs what x's chosen e-node costs with its own part replaced by
    `cost.inlined` of it (computed in the reader's loop: search/costs.py); a cost without `inlined` keeps it,
    and one that makes `Inline` itself infinite never chooses it.
    """
    inlined = getattr(cost, "inlined", cost)
    parents: dict[Any, list[Any]] = {c: [] for c in classes}
    for cls, nodes in classes.items():
        for _, args in nodes:
            for a in args:
                if isinstance(a, Ref):
                    parents[a.key].append(cls)
    best: dict[Any, tuple[float, float, Choice]] = {}
    work = list(classes)
    while work:
        cls = work.pop()
        for name, args in classes[cls]:
            children = [a.key for a in args if isinstance(a, Ref)]
            if not all(c in best for c in children):
                continue
            if name == "Inline":
                if not math.isfinite(cost(name, _literals(args))):
                    continue  # a cost that forbids fusion
                total, tree, (inner, inner_args) = best[children[0]]
                own = cost(inner, _literals(inner_args))
                saved = own - inlined(inner, _literals(inner_args)) if math.isfinite(own) else 0.0
                found = (total - saved, tree - saved, (name, args))
            else:
                own = cost(name, _literals(args))
                found = (
                    own + combine([best[c][0] for c in children]),
                    own + sum(best[c][1] for c in children),
                    (name, args),
                )
            if cls not in best or found[:2] < best[cls][:2]:
                best[cls] = found
                work.extend(parents[cls])
    return best
