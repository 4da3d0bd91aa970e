"""Billing a language model's sequences: each sequence that ran is one usage record of one request, its seconds
its share of the compute (its prefill and its part of every decode step it rode in), its prompt and completion
tokens beside them. The record's batch id is the request's id, so writing it twice bills it once."""

from __future__ import annotations

import os
import socket
import time

from luminal.scheduler.billing import UsageLedger, UsageRecord
from luminal.scheduler.generation.stream import Account, TokenStream


def sequence_record(
    stream: TokenStream, worker_id: str, now: float | None = None, device: str | None = None
) -> UsageRecord | None:
    """The usage record of a sequence that ran (None: not billable, no account or never prefilled), billed as the
    device it ran on (None: its deployment's GPU type)."""
    account = stream.account
    if account is None or stream.started_at is None:
        return None
    ended = max(time.time() if now is None else now, stream.started_at)
    gpu_type = account.gpu_type if device is None else device
    tokens = (stream.prompt_tokens, stream.completion_tokens)
    return sequence_usage(account, worker_id, gpu_type, (stream.started_at, ended), tokens, stream.compute_s)


def sequence_usage(
    account: Account,
    worker_id: str,
    gpu_type: str,
    span: tuple[float, float],  # (started_at, ended_at), wall-clock seconds
    tokens: tuple[int, int],  # (prompt, completion)
    compute_s: float | None,  # its share of the compute (None: the whole span)
) -> UsageRecord:
    """One sequence's usage record, billed alone under its request id: its seconds its compute share, at most its
    span."""
    started, ended = span
    return UsageRecord(
        batch_id=account.request_id,
        deployment_id=account.deployment_id,
        tenant_id=account.tenant_id,
        worker_id=worker_id,
        gpu_type=gpu_type,
        started_at=started,
        ended_at=ended,
        request_ids=(account.request_id,),
        request_rows=(1,),
        model_name=account.model_name,
        model_version=account.model_version,
        prompt_tokens=tokens[0],
        completion_tokens=tokens[1],
        billed_seconds=ended - started if compute_s is None else min(compute_s, ended - started),
    )


class SequenceBilling:
    """An engine's `on_end`: writes each ended sequence's record to the ledger, under the worker that ran it and
    the device it ran on."""

    def __init__(self, ledger: UsageLedger, worker_id: str | None = None, device: str | None = None):
        self.ledger = ledger
        self.worker_id = worker_id or f"generation@{socket.gethostname()}:{os.getpid()}"
        self.device = device

    def __call__(self, stream: TokenStream) -> None:
        record = sequence_record(stream, self.worker_id, device=self.device)
        if record is not None:
            self.ledger.record(record)
