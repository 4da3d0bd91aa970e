"""Two gateways on one database and one Redis queue (SQLite and PostgreSQL): the provisioner of exactly one holds
the lease; when that gateway stops, the other's provisioner takes the lease over without waiting for it to
expire."""

from __future__ import annotations

import time

import pytest

from luminal.gateway.app import start_platform, stop_platform
from luminal.store.leases import PROVISIONER, holder_of
from tests.scheduler.queue_fixtures import REDIS_URL, redis_namespace  # noqa: F401


def lease_holder(platform) -> str | None:
    with platform.db.session() as s:
        return holder_of(s, PROVISIONER, time.time())


def wait_for_holder(platform, expected: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while lease_holder(platform) != expected:
        if time.monotonic() > deadline:
            pytest.fail(f"the lease is held by {lease_holder(platform)!r}, not {expected!r}")
        time.sleep(0.05)


def test_one_gateways_provisioner_holds_the_lease_and_hands_it_on(settings, tmp_path, redis_namespace):  # noqa: F811
    # A 4 s lease: the waiting gateway tries every second, not every 2.5 s as with the default 10 s.
    update = {"queue_url": REDIS_URL, "queue_namespace": redis_namespace, "provisioner_lease_s": 4.0}
    shared = settings.model_copy(update=update)
    first = start_platform(shared)
    second = None
    try:
        first_id = first.heartbeat.replica_id
        wait_for_holder(first, first_id)
        second = start_platform(shared.model_copy(update={"data_dir": tmp_path / "data-b"}))
        second_id = second.heartbeat.replica_id
        assert second_id != first_id
        assert first.provisioner.lease is not None and second.provisioner.lease is not None
        assert lease_holder(second) == first_id  # the second gateway's provisioner waits
        stop_platform(first)  # a graceful stop releases the lease
        first = None
        wait_for_holder(second, second_id, timeout_s=15.0)  # at its next try, not after the lease time
    finally:
        for platform in (first, second):
            if platform is not None:
                stop_platform(platform)


def test_a_gateway_with_its_own_queue_has_no_lease(settings):
    platform = start_platform(settings)
    try:
        assert platform.provisioner.lease is None and platform.provisioner.acting()
    finally:
        stop_platform(platform)
