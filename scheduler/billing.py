"""The billing ledger's interface: one usage record per executed batch, written by the worker that ran it.

Each request is billed exactly once. A record is keyed by its batch id, so writing it again (a retried write)
is a no-op; and by its requests' ids, so a request that a dead worker's batch billed and another worker re-ran
after reclaiming it is not billed again by the re-run's batch. Each request of a batch is billed its share,
`(ended_at - started_at) * rows / total rows` (rows: the request's extent along the batch dimension).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class UsageRecord:
    batch_id: str
    deployment_id: int
    tenant_id: int
    worker_id: str
    gpu_type: str
    started_at: float  # wall-clock seconds (time.time()) when execution started
    ended_at: float
    request_ids: tuple[str, ...]
    request_rows: tuple[int, ...]  # each request's rows, in the order of request_ids
    # The deployment's model, copied into the record; None: the ledger looks them up by deployment_id.
    model_name: str | None = None
    model_version: int | None = None
    # A language model's sequence is billed alone, its tokens beside its seconds; `billed_seconds` is then its
    # share of the decode steps it rode in (each step's time split among its rows) plus its prefill, not the
    # wall time from its start to its end. None: the whole of ended_at - started_at.
    prompt_tokens: int = 0
    completion_tokens: int = 0
    billed_seconds: float | None = None

    @property
    def batch_size(self) -> int:
        return len(self.request_ids)

    @property
    def seconds(self) -> float:
        return self.ended_at - self.started_at if self.billed_seconds is None else self.billed_seconds

    def shares(self) -> dict[str, float]:
        """Each request's billed seconds; they sum to the batch's execution time."""
        total = sum(self.request_rows) or 1
        return {rid: self.seconds * rows / total for rid, rows in zip(self.request_ids, self.request_rows)}


class LedgerError(ValueError):
    """The record cannot be billed as it is (malformed, unpriced GPU type, unknown tenant); nothing was written.
    Writing it again cannot succeed, unlike a failure of the database."""


class UsageLedger(Protocol):
    def record(self, record: UsageRecord) -> bool:
        """Write the record once; False when it bills nothing: a record with its batch id exists, or each of its
        requests was billed already."""
        ...
