"""Helpers of the tenancy tests: the admin token the test servers are given, and tenants made through the admin
API the way an operator makes them."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from luminal.store.settings import Settings
from tests.gateway.conftest import BOOTSTRAP_KEY, COMPILE_RUNNER

ADMIN_TOKEN = "test-admin-token-0123456789abcdef"


def settings_with_admin(tmp_path: Path, database_url: str, admin_token: str | None = ADMIN_TOKEN) -> Settings:
    """The gateway tests' settings plus the admin token. (A module's `settings` fixture builds on this rather
    than on the shared fixture of the same name: pytest then loses that fixture's database parametrization.)"""
    return Settings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        bootstrap_key=BOOTSTRAP_KEY,
        max_upload_bytes=2**20,
        admin_token=admin_token,
        compile_runner=COMPILE_RUNNER,
    )


class SteppedClock:
    """A clock for rate limits that moves only when the test moves it."""

    def __init__(self, now: float = 1_700_000_000.0):  # epoch-sized, as the Redis limiter's clock is
        self.now = now

    def __call__(self) -> float:
        return self.now


def admin(server) -> httpx.Client:
    return server.client(key=ADMIN_TOKEN)


def new_tenant(server, name: str, **quotas) -> tuple[dict, httpx.Client]:
    """A tenant created through `POST /v1/admin/tenants`, and a client holding its first key."""
    created = admin(server).post("/v1/admin/tenants", json={"name": name, **quotas})
    assert created.status_code == 201, created.text
    return created.json(), server.client(key=created.json()["key"])


def wait_for_replicas(server, deployment_id: int, replicas: int, timeout: float = 60) -> None:
    """Until the provisioner runs `replicas` workers for the deployment (it reconciles in its own thread)."""
    deadline = time.monotonic() + timeout
    while server.platform.provisioner.status(deployment_id)["replicas"] != replicas:
        assert time.monotonic() < deadline, server.platform.provisioner.status(deployment_id)
        time.sleep(0.05)
