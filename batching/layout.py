"""Whether a program can run several requests as one batch, and along which axis.

A program is batchable when every input and every output has the same symbol as its leading dim (and that
symbol appears nowhere else in the signature): then stacking requests along axis 0 is a valid input, and row
i of every output belongs to row i of the inputs. That is the contract a batchable model keeps (rows never mix);
the signature cannot prove it, so `split` at least checks every output's extent. A signature that declares
padding also lets requests of different sequence lengths share a batch (`sequence.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from luminal.batching.requests import BatchRequest
from luminal.batching.sequence import SequencePadding, symbol_name

BATCH_AXIS = 0


def _mentions(dim: Any, name: str) -> bool:
    if isinstance(dim, list):
        return symbol_name(dim) == name or any(_mentions(part, name) for part in dim[1:])
    return False


@dataclass(frozen=True)
class BatchLayout:
    symbol: str  # the batch dim's symbol
    min_rows: int  # the symbol's range: a smaller batch is padded up to min_rows
    max_rows: int
    # Batch sizes the program was compiled for, smallest first; None: any size in [min_rows, max_rows].
    buckets: tuple[int, ...] | None = None
    # The sequence dims requests may be padded along to share a batch; None: only equal shapes batch.
    padding: SequencePadding | None = None

    @classmethod
    def from_signature(
        cls,
        signature: Mapping[str, Any],
        symbols: Mapping[str, Any],
        buckets: Sequence[int] | None = None,
        length_buckets: Sequence[int] | None = None,
    ) -> BatchLayout | None:
        """The layout of a stored signature ({"inputs": [...], "outputs": [...]}, each entry {"name", "dtype",
        "shape"}, with "pad"/"unpad" where the graph declares padding) and symbol table ({name: {"min", "max"}});
        None when the program cannot be batched. `length_buckets`: see `SequencePadding.from_signature`."""
        entries = [*signature.get("inputs", []), *signature.get("outputs", [])]
        if not signature.get("inputs") or not signature.get("outputs"):
            return None
        shapes = [entry["shape"] for entry in entries]
        if any(not isinstance(shape, list) or not shape for shape in shapes):
            return None  # a scalar has no batch axis
        name = symbol_name(shapes[0][0])
        if name is None or any(symbol_name(shape[0]) != name for shape in shapes):
            return None
        # (batch, batch) or (batch, 2*batch) would change more than one dim when requests are stacked.
        if any(_mentions(dim, name) for shape in shapes for dim in shape[1:]):
            return None
        bounds = symbols.get(name)
        if not isinstance(bounds, Mapping):
            raise ValueError(f"the signature's batch symbol {name!r} is missing from the symbol table")
        lo, hi = bounds.get("min"), bounds.get("max")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi)) or not 0 <= lo <= hi:
            raise ValueError(f"symbol {name!r} has an invalid range {bounds!r}")
        min_rows = max(lo, 1)
        if buckets is not None:
            buckets = tuple(buckets)
            if not buckets or any(not min_rows <= b <= hi for b in buckets) or list(buckets) != sorted(set(buckets)):
                raise ValueError(f"compiled batch sizes {buckets!r} must be increasing and within [{min_rows}, {hi}]")
        return cls(
            name, min_rows, hi, buckets, SequencePadding.from_signature(signature, symbols, name, length_buckets)
        )

    def rows_of(self, request: BatchRequest) -> int | None:
        """The request's extent on the batch axis; None when its inputs disagree on it (or have no batch axis):
        such a request runs alone and the program reports what is wrong with it."""
        extents = {a.shape[BATCH_AXIS] if getattr(a, "ndim", 0) > 0 else None for a in request.inputs.values()}
        if len(extents) != 1:
            return None
        rows = extents.pop()
        return rows if rows is not None and rows >= 1 else None

    def padded_size(self, rows: int, buckets: Sequence[int] | None = None) -> int:
        """The size a batch of `rows` real rows runs at: the smallest bucket that holds it (`buckets` overrides
        the layout's own), else at least `min_rows`. Raises ValueError when no bucket holds it."""
        buckets = self.buckets if buckets is None else buckets
        if buckets is None:
            return max(rows, self.min_rows)
        for size in buckets:
            if size >= rows:
                return size
        raise ValueError(f"a batch of {rows} rows exceeds the largest compiled batch size {buckets[-1]}")
