"""Sequence padding: requests of different lengths in one batch, each given back what it would get alone.

A graph that declares padding (`luminal.padding`; in its stored signature, "pad" on inputs and "unpad" on
outputs) lets requests whose padded dims differ share a batch. Requests are grouped by length bucket (the
smallest bucket holding each padded length: powers of two from 32 unless buckets are given), so a 5-token
sentence never pays for a 500-token one; within a group every request is padded to the group's longest length with the
declared values, and every output dim that follows a padded dim is cut back to the request's own length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from luminal.batching.requests import BatchRequest

PadDims = tuple[tuple[int, str, Any], ...]  # (axis, symbol, pad value) of one input


def symbol_name(dim: Any) -> str | None:
    """The symbol's name when the JSON dim is a plain symbol (["var", name, lo, hi]), else None."""
    if isinstance(dim, list) and len(dim) == 4 and dim[0] == "var" and isinstance(dim[1], str):
        return dim[1]
    return None


# The smallest default length bucket. Finer buckets split a formed batch into more executions run one after
# another: for short texts (most sentences are under 32 tokens) one execution over a few padded positions
# costs less than a second execution with its fixed overhead, and a batch that stays whole batches better.
MIN_LENGTH_BUCKET = 32


def powers_of_two(limit: int, start: int = MIN_LENGTH_BUCKET) -> tuple[int, ...]:
    """start, 2 * start, ... below `limit`, then `limit` (the symbol's maximum, a bucket even when not a power
    of two)."""
    sizes, size = [], start
    while size < limit:
        sizes.append(size)
        size *= 2
    return (*sizes, limit)


@dataclass(frozen=True)
class SequencePadding:
    inputs: Mapping[str, PadDims]
    outputs: Mapping[str, tuple[tuple[int, str], ...]]  # output -> (axis, symbol) of each dim that follows
    buckets: Mapping[str, tuple[int, ...]]  # symbol -> its length buckets, increasing, the last its maximum

    @classmethod
    def from_signature(
        cls,
        signature: Mapping[str, Any],
        symbols: Mapping[str, Any],
        batch_symbol: str,
        length_buckets: Sequence[int] | None = None,
    ) -> SequencePadding | None:
        """The padding a stored signature declares; None when it declares none (or pads the batch symbol).
        `length_buckets` (one list for
        every padded symbol) replaces the powers of two; lengths above its last bucket share the symbol's max."""
        inputs: dict[str, PadDims] = {}
        for entry in signature.get("inputs", []):
            dims = []
            for pad in entry.get("pad", []):
                symbol = symbol_name(entry["shape"][pad["dim"]])
                if symbol is None or symbol == batch_symbol:
                    return None  # padding the batch dim itself is meaningless to a batcher: it stacks rows there
                dims.append((pad["dim"], symbol, pad["value"]))
            if dims:
                inputs[entry["name"]] = tuple(dims)
        if not inputs:
            return None
        outputs = {
            entry["name"]: tuple((axis, symbol_name(entry["shape"][axis])) for axis in entry["unpad"])
            for entry in signature.get("outputs", [])
            if entry.get("unpad")
        }
        if length_buckets is not None:
            length_buckets = tuple(length_buckets)
            valid = all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in length_buckets)
            if not length_buckets or not valid or list(length_buckets) != sorted(set(length_buckets)):
                raise ValueError(f"length buckets must be increasing positive integers, got {length_buckets!r}")
        padded = {symbol for dims in inputs.values() for _, symbol, _ in dims}
        buckets = {}
        for symbol in sorted(padded):
            limit = symbols[symbol]["max"]
            chosen = powers_of_two(limit) if length_buckets is None else length_buckets
            buckets[symbol] = (*(b for b in chosen if b < limit), limit)
        return cls(inputs, outputs, buckets)

    def lengths_of(self, request: BatchRequest) -> dict[str, int] | None:
        """The request's extent of each padded symbol; None when its inputs disagree (or lack a padded input):
        such a request runs alone and the program says what is wrong with it."""
        lengths: dict[str, int] = {}
        for name, dims in self.inputs.items():
            array = request.inputs.get(name)
            if array is None:
                return None
            for axis, symbol, _ in dims:
                if array.ndim <= axis or lengths.setdefault(symbol, array.shape[axis]) != array.shape[axis]:
                    return None
        return lengths

    def bucket_of(self, symbol: str, length: int) -> int:
        for size in self.buckets[symbol]:
            if length <= size:
                return size
        return length  # over the symbol's maximum: the program rejects it, alone or not

    def key(self, request: BatchRequest) -> tuple:
        """What replaces the padded dims in a batch key: each padded symbol's bucket."""
        lengths = self.lengths_of(request)
        if lengths is None:
            return ("alone", request.id)
        return tuple(sorted((s, self.bucket_of(s, n)) for s, n in lengths.items()))

    def pad(self, name: str, array: np.ndarray, lengths: Mapping[str, int]) -> np.ndarray:
        """`array` (input `name`) padded at the end of each padded dim to `lengths`, with the declared values."""
        for axis, symbol, value in self.inputs.get(name, ()):
            missing = lengths[symbol] - array.shape[axis]
            if missing > 0:
                widths = [(0, 0)] * array.ndim
                widths[axis] = (0, missing)
                array = np.pad(array, widths, constant_values=np.asarray(value, array.dtype))
        return array

    def unpad(self, name: str, array: np.ndarray, padded: Mapping[str, int], own: Mapping[str, int]) -> np.ndarray:
        """One request's slice of output `name` cut back from the batch's `padded` lengths to its `own`."""
        index: list[slice] = [slice(None)] * array.ndim
        for axis, symbol in self.outputs.get(name, ()):
            if array.shape[axis] != padded[symbol]:
                raise ValueError(
                    f"output {name!r} dim {axis} is {array.shape[axis]}, but the batch padded {symbol!r} to "
                    f"{padded[symbol]}: the program broke its padding declaration"
                )
            index[axis] = slice(0, own[symbol])
        return array[tuple(index)]
