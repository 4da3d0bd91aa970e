"""The usage record of a sequence its worker's death cut short. A dead worker never bills the sequence it was
generating (it bills each sequence as it ends), so the gateway relaying it does, for the tokens it delivered:
under the dead worker's id, the deployment's GPU type (the one its workers run on), and the compute share the
worker stamped on its last delta. The batch id is the request id, as the worker's own record would have it, so
should the worker turn out alive and end the sequence itself, the ledger bills it once."""

from __future__ import annotations

from dataclasses import dataclass

from luminal.scheduler.billing import UsageRecord
from luminal.scheduler.generation.billing import sequence_usage
from luminal.scheduler.sequences.request import SequenceRequest


@dataclass(frozen=True)
class CutShort:
    """What the relay saw of a sequence before its worker died."""

    request: SequenceRequest
    worker_id: str
    taken_at: float  # wall-clock seconds when the worker's Started arrived
    ended_at: float  # when the relay found the worker dead
    completion_tokens: int  # deltas delivered
    compute_s: float | None  # the worker's last stamp of the sequence's compute (None: it stamped none)


def cut_short_record(seen: CutShort) -> UsageRecord:
    ended = max(seen.ended_at, seen.taken_at)
    tokens = (len(seen.request.prompt), seen.completion_tokens)
    account = seen.request.account
    return sequence_usage(account, seen.worker_id, account.gpu_type, (seen.taken_at, ended), tokens, seen.compute_s)
