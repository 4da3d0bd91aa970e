"""Language-model workers' gauges for `/metrics`, wherever their engines run (a thread of this gateway, a worker
process, another machine): read at scrape time from the load reports every worker publishes through the sequence
transport each heartbeat, labelled by deployment and worker. Engines inside this process are also shown by program
(generation_metrics.EngineCollector); these cover the rest, which the gateway cannot look into.

A report older than routing.REPORT_STALE_S is left out: its worker is gone (or hung), and its last figures would
read as a live load."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from luminal.scheduler.registry import WorkerRegistry
from luminal.scheduler.sequences.base import SequenceTransport
from luminal.scheduler.sequences.routing import is_live

log = logging.getLogger(__name__)
LABELS = ["deployment", "worker"]


class WorkerLoadCollector(Collector):
    def __init__(self, registry: WorkerRegistry, sequences: SequenceTransport):
        self.registry, self.sequences = registry, sequences

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families = {
            "running": GaugeMetricFamily("luminal_worker_sequences_running",
                                         "Sequences in the worker's decode batch or prefilling into it", labels=LABELS),
            "waiting": GaugeMetricFamily("luminal_worker_sequences_waiting",
                                         "Sequences the worker took that wait for KV cache blocks", labels=LABELS),
            "used": GaugeMetricFamily("luminal_worker_kv_cache_blocks_in_use",
                                      "KV cache blocks held by the worker's sequences", labels=LABELS),
            "free": GaugeMetricFamily("luminal_worker_kv_cache_blocks_free",
                                      "Free KV cache blocks of the worker's pool", labels=LABELS),
            "rate": GaugeMetricFamily("luminal_worker_generation_tokens_per_second",
                                      "Tokens the worker generated per second, between its last two reports",
                                      labels=LABELS),
        }  # fmt: skip
        try:
            self._add_reports(families)
        except Exception:  # the transport is away: this scrape goes without these gauges, not without the rest
            log.warning("reading the workers' load reports for /metrics failed", exc_info=True)
        yield from families.values()

    def _add_reports(self, families: dict[str, GaugeMetricFamily]) -> None:
        now = time.time()
        for deployment_id in sorted({w.deployment_id for w in self.registry.workers()}):
            for worker, load in sorted(self.sequences.recent_loads(deployment_id).items()):
                if not is_live(load, now):
                    continue
                labels = [str(deployment_id), worker]
                families["running"].add_metric(labels, load.running)
                families["waiting"].add_metric(labels, load.waiting)
                families["rate"].add_metric(labels, load.tokens_per_s)
                if load.kv_blocks_free is not None:
                    families["free"].add_metric(labels, load.kv_blocks_free)
                    if load.kv_blocks is not None:
                        families["used"].add_metric(labels, load.kv_blocks - load.kv_blocks_free)
