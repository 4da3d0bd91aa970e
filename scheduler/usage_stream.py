"""A usage ledger for worker processes on Redis that bill outside a batch's completion (language-model workers,
one record per ended sequence): each record is appended to the usage stream the batch workers' completions feed,
and the gateways' `UsageDrainer` writes it to the database. A record is keyed by its request id (its batch id),
so one appended twice is billed once."""

from __future__ import annotations

import redis

from luminal.scheduler import usage_journal
from luminal.scheduler.billing import UsageRecord
from luminal.scheduler.queues.redis_streams import usage_stream


class UsageStreamLedger:
    def __init__(self, url: str, namespace: str = "lm"):
        self._redis = redis.Redis.from_url(url)
        self._stream = usage_stream(namespace)

    def record(self, record: UsageRecord) -> bool:
        self._redis.xadd(self._stream, {"record": usage_journal.encode(record)})
        return True

    def close(self) -> None:
        self._redis.close()
