"""Requests into one batch and the batch's outputs back into per-request results.

Rows are stacked along the batch axis in queue order; each request remembers its row range. A batch is padded
up to its bucket by repeating the last real row: a repeated row is a valid input, while zeros can make NaN or
inf in some models (a log, a normalization), which costs time and trips floating-point checks. `split` strips
the padding again, after checking the program kept the batch contract (every output has the batch's rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from luminal.batching.layout import BATCH_AXIS, BatchLayout
from luminal.scheduler.work import InferenceRequest


class BatchContractError(RuntimeError):
    """The program's outputs do not have one row per input row: the batch cannot be split among requests."""


@dataclass(frozen=True)
class AssembledBatch:
    inputs: dict[str, np.ndarray]  # each with `padded_rows` rows
    request_ids: tuple[str, ...]
    row_ranges: tuple[tuple[int, int], ...]  # each request's [start, stop) rows, in the order of request_ids
    rows: int  # real rows
    padded_rows: int  # rows the program runs: rows plus padding

    @property
    def request_rows(self) -> tuple[int, ...]:
        return tuple(stop - start for start, stop in self.row_ranges)


def _batch_key(request: InferenceRequest) -> tuple:
    """What must match for two requests to share a batch: input names, dtypes and every dim but the batch's."""
    return tuple(sorted((name, a.dtype.str, a.shape[BATCH_AXIS + 1 :]) for name, a in request.inputs.items()))


def compatible_groups(requests: Sequence[InferenceRequest]) -> list[list[InferenceRequest]]:
    """Requests split into groups that can each run as one batch; queue order is kept within each group, and the
    groups come in the order of their first request."""
    groups: dict[tuple, list[InferenceRequest]] = {}
    for request in requests:
        groups.setdefault(_batch_key(request), []).append(request)
    return list(groups.values())


def assemble(
    requests: Sequence[InferenceRequest], layout: BatchLayout, buckets: Sequence[int] | None = None
) -> AssembledBatch:
    """One batch of `requests` (all compatible), padded to the smallest bucket that holds it (`buckets`, else
    the layout's). Raises ValueError naming the problem when they cannot form one batch."""
    if not requests:
        raise ValueError("cannot assemble an empty batch")
    key = _batch_key(requests[0])
    ranges, start = [], 0
    for request in requests:
        if _batch_key(request) != key:
            raise ValueError(f"request {request.id} does not match the batch's input names, dtypes or dims")
        rows = layout.rows_of(request)
        if rows is None:
            raise ValueError(f"request {request.id}: its inputs do not share one extent on the batch axis")
        ranges.append((start, start + rows))
        start += rows
    total = start
    padded = layout.padded_size(total, buckets)
    inputs = {}
    for name in requests[0].inputs:
        parts = [request.inputs[name] for request in requests]
        if padded > total:
            last_row = parts[-1][-1:]
            parts.append(np.repeat(last_row, padded - total, axis=BATCH_AXIS))
        inputs[name] = np.concatenate(parts, axis=BATCH_AXIS)
    return AssembledBatch(inputs, tuple(r.id for r in requests), tuple(ranges), total, padded)


def split(batch: AssembledBatch, outputs: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Each request's rows of every output (padding dropped), in the order of `batch.request_ids`."""
    for name, array in outputs.items():
        extent = array.shape[BATCH_AXIS] if array.ndim > 0 else None
        if extent != batch.padded_rows:
            raise BatchContractError(
                f"output {name!r} has shape {array.shape}, but the batch ran {batch.padded_rows} rows: "
                "the program broke the batch contract (one output row per input row)"
            )
    return [{name: array[start:stop] for name, array in outputs.items()} for start, stop in batch.row_ranges]
