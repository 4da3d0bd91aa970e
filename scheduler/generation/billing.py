"""Billing a language model's sequences: each sequence that ran is one usage record of one request, its seconds
its share of the compute (its prefill and its part of every decode step it rode in), its prompt and completion
tokens beside them. The record's batch id is the request's id, so writing it twice bills it once."""

from __future__ import annotations

import os
import socket
import time

from luminal.scheduler.billing import UsageLedger, UsageRecord
from luminal.scheduler.generation.stream import TokenStream


def sequence_record(stream: TokenStream, worker_id: str, now: float | None = None) -> UsageRecord | None:
    """The usage record of a sequence that ran (None: not billable, no account or never prefilled)."""
    account = stream.account
    if account is None or stream.started_at is None:
        return None
    ended = max(time.time() if now is None else now, stream.started_at)
    return UsageRecord(
        batch_id=account.request_id,
        deployment_id=account.deployment_id,
        tenant_id=account.tenant_id,
        worker_id=worker_id,
        gpu_type=account.gpu_type,
        started_at=stream.started_at,
        ended_at=ended,
        request_ids=(account.request_id,),
        request_rows=(1,),
        model_name=account.model_name,
        model_version=account.model_version,
        prompt_tokens=stream.prompt_tokens,
        completion_tokens=stream.completion_tokens,
        billed_seconds=min(stream.compute_s, ended - stream.started_at),
    )


class SequenceBilling:
    """The engines' `on_end`: writes each ended sequence's record to the ledger."""

    def __init__(self, ledger: UsageLedger):
        self.ledger = ledger
        self.worker_id = f"generation@{socket.gethostname()}:{os.getpid()}"

    def __call__(self, stream: TokenStream) -> None:
        record = sequence_record(stream, self.worker_id)
        if record is not None:
            self.ledger.record(record)
