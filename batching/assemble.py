"""Requests into one batch and the batch's outputs back into per-request results.

Rows are stacked along the batch axis in queue order; each request remembers its row range. A batch is padded
up to its bucket by repeating the last real row: a repeated row is a valid input, while zeros can make NaN or
inf in some models (a log, a normalization), which costs time and trips floating-point checks. `split` strips
the padding again, after checking the program kept the batch contract (every output has the batch's rows).

A layout with sequence padding (`sequence.py`) also groups requests of different lengths by length bucket (and
`padded_runs` cuts a group into runs of similar length where that is cheaper, `length_runs.py`), pads each to
its group's longest, and cuts every output dim that follows a padded dim back to each request's length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from luminal.batching.layout import BATCH_AXIS, BatchLayout
from luminal.batching.length_runs import DEFAULT_OVERHEAD_TOKENS, length_runs
from luminal.batching.requests import BatchRequest
from luminal.batching.sequence import SequencePadding


class BatchContractError(RuntimeError):
    """The program's outputs do not have one row per input row: the batch cannot be split among requests."""


@dataclass(frozen=True)
class AssembledBatch:
    inputs: dict[str, np.ndarray]  # each with `padded_rows` rows
    request_ids: tuple[str, ...]
    row_ranges: tuple[tuple[int, int], ...]  # each request's [start, stop) rows, in the order of request_ids
    rows: int  # real rows
    padded_rows: int  # rows the program runs: rows plus padding
    padding: SequencePadding | None = None  # the layout's sequence padding, when the requests were padded
    lengths: tuple[dict[str, int], ...] = ()  # each request's own length of every padded symbol
    padded_lengths: dict[str, int] | None = None  # the lengths the program runs: the group's longest

    @property
    def request_rows(self) -> tuple[int, ...]:
        return tuple(stop - start for start, stop in self.row_ranges)


def _batch_key(request: BatchRequest, padding: SequencePadding | None = None) -> tuple:
    """What must match for two requests to share a batch: input names, dtypes and every dim but the batch's,
    where a padded dim's extent is replaced by its length bucket."""
    if padding is None:
        return tuple(sorted((name, a.dtype.str, a.shape[BATCH_AXIS + 1 :]) for name, a in request.inputs.items()))
    padded_axes = {name: {axis for axis, _, _ in dims} for name, dims in padding.inputs.items()}

    def dims(name: str, a: np.ndarray) -> tuple:
        skip = padded_axes.get(name, set())
        return tuple(None if axis in skip else n for axis, n in enumerate(a.shape) if axis != BATCH_AXIS)

    names = tuple(sorted((name, a.dtype.str, dims(name, a)) for name, a in request.inputs.items()))
    return names, padding.key(request)


def compatible_groups(requests: Sequence[BatchRequest], layout: BatchLayout | None = None) -> list[list[BatchRequest]]:
    """Requests split into groups that can each run as one batch; queue order is kept within each group, and the
    groups come in the order of their first request."""
    padding = layout.padding if layout is not None else None
    groups: dict[tuple, list[BatchRequest]] = {}
    for request in requests:
        groups.setdefault(_batch_key(request, padding), []).append(request)
    return list(groups.values())


def padded_runs(
    requests: Sequence[BatchRequest], layout: BatchLayout | None, overhead_tokens: float = DEFAULT_OVERHEAD_TOKENS
) -> list[list[BatchRequest]]:
    """The executions `requests` make: `compatible_groups`, each group of a padded layout cut into runs of
    similar length where that costs less than padding them all to the longest (`length_runs.py`)."""
    groups = compatible_groups(requests, layout)
    padding = layout.padding if layout is not None else None
    if padding is None:
        return groups
    return [
        run
        for group in groups
        for run in length_runs(
            group, lambda r: padding.lengths_of(r) or {}, lambda r: layout.rows_of(r) or 1, overhead_tokens
        )
    ]


def assemble(
    requests: Sequence[BatchRequest], layout: BatchLayout, buckets: Sequence[int] | None = None
) -> AssembledBatch:
    """One batch of `requests` (all compatible), padded to the smallest bucket that holds it (`buckets`, else
    the layout's). Raises ValueError naming the problem when they cannot form one batch."""
    if not requests:
        raise ValueError("cannot assemble an empty batch")
    padding = layout.padding
    key = _batch_key(requests[0], padding)
    ranges, start = [], 0
    for request in requests:
        if _batch_key(request, padding) != key:
            raise ValueError(f"request {request.id} does not match the batch's input names, dtypes or dims")
        rows = layout.rows_of(request)
        if rows is None:
            raise ValueError(f"request {request.id}: its inputs do not share one extent on the batch axis")
        ranges.append((start, start + rows))
        start += rows
    total = start
    padded = layout.padded_size(total, buckets)
    lengths = tuple(padding.lengths_of(r) for r in requests) if padding is not None else ()
    longest = {s: max(own[s] for own in lengths) for s in lengths[0]} if lengths else None
    inputs = {}
    for name in requests[0].inputs:
        parts = [request.inputs[name] for request in requests]
        if longest is not None:
            parts = [padding.pad(name, part, longest) for part in parts]
        if padded > total:
            last_row = parts[-1][-1:]
            parts.append(np.repeat(last_row, padded - total, axis=BATCH_AXIS))
        inputs[name] = np.concatenate(parts, axis=BATCH_AXIS)
    ids = tuple(r.id for r in requests)
    return AssembledBatch(inputs, ids, tuple(ranges), total, padded, padding, lengths, longest)


def split(batch: AssembledBatch, outputs: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Each request's rows of every output (padding dropped), in the order of `batch.request_ids`."""
    for name, array in outputs.items():
        extent = array.shape[BATCH_AXIS] if array.ndim > 0 else None
        if extent != batch.padded_rows:
            raise BatchContractError(
                f"output {name!r} has shape {array.shape}, but the batch ran {batch.padded_rows} rows: "
                "the program broke the batch contract (one output row per input row)"
            )
    if batch.padding is None:
        return [{name: array[start:stop] for name, array in outputs.items()} for start, stop in batch.row_ranges]
    try:
        return [
            {
                name: batch.padding.unpad(name, array[start:stop], batch.padded_lengths, own)
                for name, array in outputs.items()
            }
            for (start, stop), own in zip(batch.row_ranges, batch.lengths)
        ]
    except ValueError as e:
        raise BatchContractError(str(e)) from None
