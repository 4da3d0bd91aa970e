"""Control flow, unrolled into the static graph: Scan and Loop repeat their body once per iteration, If
picks its branch at import when the condition is known (else computes both and selects element-wise).

A Loop must have a trip count or a condition known at import; one whose condition depends on data would
have a data-dependent number of iterations, which a static graph cannot hold.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import luminal.functional as F
from luminal.onnx.context import NodeContext
from luminal.onnx.registry import translates
from luminal.onnx.scope import materialize
from luminal.tensor import Tensor

MAX_UNROLLED = 4096  # a Loop unrolled past this many iterations would be a graph too large to be useful


def _tensor(ctx: NodeContext, value: Any, name: str) -> Tensor:
    return value if isinstance(value, Tensor) else materialize(ctx.graph, name, np.asarray(value))


def _stack(ctx: NodeContext, values: list[Any], axis: int, name: str) -> Tensor:
    parts = [F.unsqueeze(_tensor(ctx, v, name), axis) for v in values]
    return F.cat(parts, axis) if len(parts) > 1 else parts[0]


@translates(
    "Scan",
    attrs={"body", "num_scan_inputs", "scan_input_axes", "scan_input_directions", "scan_output_axes",
           "scan_output_directions"},
)  # fmt: skip
def scan(ctx: NodeContext) -> list[Any]:
    if ctx.opset < 9:
        raise ctx.unsupported("Scan before opset 9 (with a batch axis and sequence_lens) is not supported")
    m = int(ctx.attr("num_scan_inputs"))
    values = [ctx.scope.value(name) if name else None for name in ctx.node.input]
    n_state = len(values) - m
    states, seqs = values[:n_state], [_tensor(ctx, v, "scan_input") for v in values[n_state:]]
    in_axes = list(ctx.attr("scan_input_axes", [0] * m))
    in_dirs = list(ctx.attr("scan_input_directions", [0] * m))
    in_axes = [a % seqs[j].ndim for j, a in enumerate(in_axes)]
    lengths = {s.shape[a] for s, a in zip(seqs, in_axes)}
    if len(lengths) != 1 or not isinstance(next(iter(lengths)), int):
        raise ctx.error(f"scan inputs must share one concrete length along their scan axes, got {lengths}")
    steps = lengths.pop()
    collected: list[list[Any]] | None = None
    for i in range(steps):
        elements = [
            F.select(s, a, steps - 1 - i if d else i) for s, a, d in zip(seqs, in_axes, in_dirs)
        ]  # fmt: skip
        outs = ctx.subgraph("body", states + elements)
        states = outs[:n_state]
        if collected is None:
            collected = [[] for _ in outs[n_state:]]
        for bucket, v in zip(collected, outs[n_state:]):
            bucket.append(v)
    collected = collected or []
    k = len(collected)
    out_axes = list(ctx.attr("scan_output_axes", [0] * k))
    out_dirs = list(ctx.attr("scan_output_directions", [0] * k))
    stacked = []
    for bucket, a, d in zip(collected, out_axes, out_dirs):
        rank = np.ndim(bucket[0]) if not isinstance(bucket[0], Tensor) else bucket[0].ndim
        stacked.append(_stack(ctx, bucket[::-1] if d else bucket, a % (rank + 1), "scan_output"))
    return list(states) + stacked


@translates("If", attrs={"then_branch", "else_branch"})
def if_(ctx: NodeContext) -> list[Any]:
    if ctx.is_const(0):
        chosen = "then_branch" if bool(np.asarray(ctx.const(0, "cond")).reshape(-1)[0]) else "else_branch"
        return ctx.subgraph(chosen, [])
    cond = F.reshape(ctx.x(0), [])
    then, other = ctx.subgraph("then_branch", []), ctx.subgraph("else_branch", [])
    picked = []
    for k, (a, b) in enumerate(zip(then, other)):
        a, b = _tensor(ctx, a, "if_then"), _tensor(ctx, b, "if_else")
        if a.shape != b.shape or a.dtype != b.dtype:
            raise ctx.unsupported(
                f"output {k}: branches of shapes {a.shape} and {b.shape} with a condition known only at run time"
            )
        picked.append(F.where(cond, a, b))
    return picked


@translates("Loop", attrs={"body"})
def loop(ctx: NodeContext) -> list[Any]:
    """Unrolled: iteration i feeds (i, cond, carried...) to the body, which returns (cond, carried..., scan
    outputs...); it stops at the trip count or when the condition, which must be known, turns false."""
    trips = int(np.asarray(ctx.const(0, "trip count M")).reshape(-1)[0]) if ctx.has(0) else None
    cond = bool(np.asarray(ctx.const(1, "cond")).reshape(-1)[0]) if ctx.has(1) else True
    carried = [ctx.scope.value(name) for name in ctx.node.input[2:]]
    limit = trips if trips is not None else MAX_UNROLLED
    if trips is not None and trips > MAX_UNROLLED:
        raise ctx.unsupported(f"a trip count of {trips} is more than the {MAX_UNROLLED} iterations unrolled")
    collected: list[list[Any]] = []
    i = 0
    while cond and i < limit:
        outs = ctx.subgraph("body", [np.array(i, dtype=np.int64), np.array(cond), *carried])
        if isinstance(outs[0], Tensor):
            raise ctx.unsupported("a loop condition computed from data is not supported (unknown iteration count)")
        cond = bool(np.asarray(outs[0]).reshape(-1)[0])
        carried = outs[1 : 1 + len(carried)]
        scans = outs[1 + len(carried) :]
        collected = collected or [[] for _ in scans]
        for bucket, v in zip(collected, scans):
            bucket.append(v)
        i += 1
    if trips is None and cond:
        raise ctx.unsupported(f"a loop still running after {MAX_UNROLLED} iterations is not supported")
    outputs = list(carried)
    n_scan = ctx.num_outputs - len(carried)
    for k in range(n_scan):
        bucket = collected[k] if k < len(collected) else []
        if not bucket:
            raise ctx.unsupported("a scan output of a loop that ran no iteration has no known shape")
        outputs.append(_stack(ctx, bucket, 0, "loop_output"))
    return outputs
