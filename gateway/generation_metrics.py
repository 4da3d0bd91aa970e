"""Language-model metrics beside the Triton-named inference ones, in the same registry (so `/metrics` shows
both): time to first token and inter-token latency per model, prompt and generated tokens (their rate is tokens
per second), and, read from the engines at scrape time, running and waiting sequences, the KV cache positions
in use and, for paged engines, the KV cache blocks in use and in the pool."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from luminal.gateway.metrics import LABELS, ModelLabels
from luminal.scheduler.generation.engines import Engines

# From a small model on an idle CPU (~1 ms a token) to a long prompt behind a full batch (~1 min to its first).
TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class GenerationMetrics:
    def __init__(self, registry: CollectorRegistry, engines: Engines):
        self.first_token = Histogram(
            "luminal_time_to_first_token_seconds",
            "Time from a generation request's arrival to its first token, in seconds",
            LABELS,
            buckets=TOKEN_BUCKETS,
            registry=registry,
        )
        self.inter_token = Histogram(
            "luminal_inter_token_latency_seconds",
            "Time between a sequence's consecutive tokens, in seconds",
            LABELS,
            buckets=TOKEN_BUCKETS,
            registry=registry,
        )
        self.prompt_tokens = Counter("luminal_prompt_tokens", "Prompt tokens read", LABELS, registry=registry)
        self.generated_tokens = Counter("luminal_generation_tokens", "Tokens generated", LABELS, registry=registry)
        registry.register(EngineCollector(engines))

    def sequence(self, labels: ModelLabels, arrived: float) -> SequenceTimer:
        return SequenceTimer(self, labels.values(), arrived)


class SequenceTimer:
    """Observes one sequence's token times (perf_counter seconds) as its tokens reach the gateway."""

    def __init__(self, metrics: GenerationMetrics, labels: tuple[str, str, str], arrived: float):
        self.metrics, self.labels, self.last = metrics, labels, arrived
        self.tokens = 0
        self._inter_token = None  # the histogram's child for these labels, looked up once (a lock and a dict)

    def token(self, now: float) -> None:
        if self.tokens == 0:
            self.metrics.first_token.labels(*self.labels).observe(max(now - self.last, 0.0))
            self._inter_token = self.metrics.inter_token.labels(*self.labels)
        else:
            self._inter_token.observe(max(now - self.last, 0.0))
        self.last, self.tokens = now, self.tokens + 1

    def ended(self, prompt_tokens: int, completion_tokens: int) -> None:
        self.metrics.prompt_tokens.labels(*self.labels).inc(prompt_tokens)
        self.metrics.generated_tokens.labels(*self.labels).inc(completion_tokens)


class EngineCollector(Collector):
    """Gauges read from the running engines when scraped, labelled by the compiled program they serve."""

    def __init__(self, engines: Engines):
        self.engines = engines

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families = {
            "running": GaugeMetricFamily(
                "luminal_sequences_running", "Sequences in the decode batch or prefilling into it", labels=["program"]
            ),
            "waiting": GaugeMetricFamily(
                "luminal_sequences_waiting", "Sequences waiting for a row", labels=["program"]
            ),
            "cache": GaugeMetricFamily(
                "luminal_kv_cache_positions",
                "KV cache positions held (paged: cached positions; else rows x cache length)",
                labels=["program"],
            ),
            "blocks": GaugeMetricFamily(
                "luminal_kv_cache_blocks_in_use",
                "KV cache blocks held by sequences (paged engines)",
                labels=["program"],
            ),
            "pool": GaugeMetricFamily(
                "luminal_kv_cache_blocks_capacity", "KV cache blocks in the pool (paged engines)", labels=["program"]
            ),
        }
        for key, engine in self.engines.snapshot():
            program = key[:12]
            families["running"].add_metric([program], len(engine.running) + len(engine.prefilling))
            families["waiting"].add_metric([program], len(engine.waiting))
            families["cache"].add_metric([program], engine.batch.positions)
            pool = getattr(engine.batch, "pool", None)
            if pool is not None:
                families["blocks"].add_metric([program], pool.in_use)
                families["pool"].add_metric([program], pool.blocks)
        yield from families.values()
