"""What a worker process makes of the environment its backend gives it: each backend's test hands it a gateway whose
settings are all unlike their defaults, and checks that the worker reads the gateway's, not the defaults."""

from __future__ import annotations

import os

import pytest

from luminal.store.settings import Settings

# The gateway's settings that a worker reads (scheduler/worker_process.py, the pods' probe), each unlike its default:
# a backend that leaves one out gives its workers the default, and the check below sees it.
GATEWAY = {
    "queue_namespace": "elsewhere",
    "gpu_prices_per_second": {"cpu": 0.5, "h100": 0.25},
    "execution_timeout_s": 45.0,
    "reclaim_idle_s": 1.5,
    "artifact_cache_bytes": 123_456_789,
}


def gateway_settings(settings: Settings) -> Settings:
    """`settings` with the gateway's values above."""
    defaults = Settings.model_fields
    assert all(defaults[name].default != value for name, value in GATEWAY.items())  # else a check proves nothing
    return settings.model_copy(update=GATEWAY)


def assert_worker_reads_the_gateways_settings(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`env`: the worker's environment as its backend gives it (the test's own LUMINAL_* variables are not)."""
    for name in [name for name in os.environ if name.startswith("LUMINAL_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("LUMINAL_"):
            monkeypatch.setenv(name, value)
    worker = Settings()  # what the worker process reads
    read = {name: getattr(worker, name) for name in GATEWAY}
    assert read == GATEWAY, f"the worker reads {read}"
