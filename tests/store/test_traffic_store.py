"""store/traffic.py on SQLite and PostgreSQL: a split is set only over ready versions, every change is appended
to the trail with the key that made it, rollback restores the split the last change replaced (and undoes itself),
routing sees only the ready versions, and one tenant never reads or changes another's split."""

from __future__ import annotations

import pytest

from luminal.store import deployments as deployment_store
from luminal.store import models as model_store
from luminal.store import tenants, traffic
from luminal.store.database import Database
from luminal.store.errors import Conflict, NotFound
from luminal.store.models import UploadedGraph
from luminal.store.traffic import Caller

SIGNATURE = {"inputs": [{"name": "x", "shape": [4], "dtype": "float32"}], "outputs": []}


def add_deployed_version(db: Database, tenant, name: str, sha: str, status: str = "ready") -> int:
    """A new version of `name` whose deployment is `status` (ready, compiling or failed)."""
    with db.session() as s:
        version, _ = model_store.add_version(s, tenant, name, UploadedGraph(sha, 10, sha, SIGNATURE, {}))
        spec = deployment_store.DeploymentSpec(name, version.version, "cpu", "cpu", 8, 5, 0, 1)
        deployment = deployment_store.create_deployment(s, tenant, spec)
        if status != deployment_store.COMPILING:
            error = "no kernel fits" if status == deployment_store.FAILED else None
            deployment_store.finish_compile(s, deployment.id, None if error else "prog", error)
        return version.version


@pytest.fixture
def acme(db: Database):
    with db.session() as s:
        tenant, key = tenants.create_tenant(s, "acme")
        row, _ = tenants.create_key(s, tenant, name="release-bot")
        return tenant, Caller(row.id, row.name)


def test_split_is_set_audited_and_rolled_back(db: Database, acme):
    tenant, caller = acme
    for sha in ("a", "b"):
        add_deployed_version(db, tenant, "m", sha)
    with db.session() as s:
        assert traffic.current_split(s, tenant, "m") is None
        traffic.set_split(s, tenant, "m", {1: 100}, caller)
        traffic.set_split(s, tenant, "m", {1: 90, 2: 10}, caller)
    with db.session() as s:
        assert traffic.current_split(s, tenant, "m") == {1: 90, 2: 10}
        assert traffic.ready_split(s, tenant, "m") == {1: 90, 2: 10}
        undone = traffic.rollback(s, tenant, "m", Caller())
        assert (undone.action, undone.old_split, undone.new_split) == ("rollback", {"1": 90, "2": 10}, {"1": 100})
    with db.session() as s:
        assert traffic.current_split(s, tenant, "m") == {1: 100}
        traffic.rollback(s, tenant, "m", caller)  # a second rollback undoes the first
        assert traffic.current_split(s, tenant, "m") == {1: 90, 2: 10}
        trail = traffic.history(s, tenant, "m")
    assert [(c.action, c.old_split, c.new_split) for c in trail] == [
        ("rollback", {"1": 100}, {"1": 90, "2": 10}),
        ("rollback", {"1": 90, "2": 10}, {"1": 100}),
        ("set", {"1": 100}, {"1": 90, "2": 10}),
        ("set", None, {"1": 100}),
    ]
    assert [(c.api_key_id, c.api_key_name) for c in trail] == [(caller.api_key_id, "release-bot"), (None, None)] + [
        (caller.api_key_id, "release-bot")
    ] * 2
    assert trail[0].changed_at >= trail[-1].changed_at and trail[0].changed_at.tzinfo is not None


def test_rollback_is_refused_without_a_previous_split(db: Database, acme):
    tenant, caller = acme
    add_deployed_version(db, tenant, "m", "a")
    with db.session() as s, pytest.raises(Conflict, match="no traffic split changes to roll back"):
        traffic.rollback(s, tenant, "m", caller)
    with db.session() as s:
        traffic.set_split(s, tenant, "m", {1: 100}, caller)
    with db.session() as s, pytest.raises(Conflict, match="no traffic split before its last change"):
        traffic.rollback(s, tenant, "m", caller)
    with db.session() as s:
        traffic.clear_split(s, tenant, "m", caller)
        assert traffic.current_split(s, tenant, "m") is None and traffic.ready_split(s, tenant, "m") is None
        traffic.rollback(s, tenant, "m", caller)  # the cleared split comes back
        assert traffic.current_split(s, tenant, "m") == {1: 100}


def test_only_ready_versions_take_traffic(db: Database, acme):
    tenant, caller = acme
    add_deployed_version(db, tenant, "m", "a")
    add_deployed_version(db, tenant, "m", "b", status="compiling")
    add_deployed_version(db, tenant, "m", "c", status="failed")
    with db.session() as s:
        model_store.add_version(s, tenant, "m", UploadedGraph("d", 10, "d", SIGNATURE, {}))  # never deployed
    refusals = {2: "version 2 cannot take traffic: it is compiling", 3: "it is failed", 4: "it is not deployed"}
    for version, message in refusals.items():
        with db.session() as s, pytest.raises(Conflict, match=message):
            traffic.set_split(s, tenant, "m", {1: 50, version: 50}, caller)
    with db.session() as s, pytest.raises(NotFound, match="model 'm' has no version 9"):
        traffic.set_split(s, tenant, "m", {1: 50, 9: 50}, caller)
    with db.session() as s:
        assert traffic.history(s, tenant, "m") == []  # a refused change leaves no trace


def test_a_deleted_version_drops_out_of_routing_and_rollback_checks_readiness(db: Database, acme):
    tenant, caller = acme
    for sha in ("a", "b", "c"):
        add_deployed_version(db, tenant, "m", sha)
    with db.session() as s:
        traffic.set_split(s, tenant, "m", {1: 50, 2: 30, 3: 20}, caller)
        traffic.set_split(s, tenant, "m", {3: 100}, caller)
        model_store.delete_version(s, tenant, "m", 2)
    with db.session() as s:
        with pytest.raises(NotFound, match="model 'm' has no version 2"):
            traffic.rollback(s, tenant, "m", caller)
        assert traffic.current_split(s, tenant, "m") == {3: 100}
        traffic.set_split(s, tenant, "m", {3: 40, 1: 60}, caller)
        model_store.delete_version(s, tenant, "m", 3)
    with db.session() as s:
        assert traffic.current_split(s, tenant, "m") == {1: 60, 3: 40}  # as set: the GET shows it
        assert traffic.ready_split(s, tenant, "m") == {1: 60}  # what routing uses


def test_percentages_are_checked():
    assert traffic.check_percentages({1: 90, 2: 10}) == {1: 90, 2: 10}
    for split, message in [
        ({}, "at least one version"),
        ({1: 90, 2: 20}, "sum to 110, not 100"),
        ({1: 100, 2: 0}, "percent 0 is outside 1..100"),
        ({0: 100}, "version 0 is not a positive integer"),
    ]:
        with pytest.raises(ValueError, match=message):
            traffic.check_percentages(split)


def test_a_tenant_never_reaches_another_tenants_split(db: Database, acme):
    tenant, caller = acme
    add_deployed_version(db, tenant, "m", "a")
    with db.session() as s:
        traffic.set_split(s, tenant, "m", {1: 100}, caller)
        other, _ = tenants.create_tenant(s, "other")
    with db.session() as s:
        for call in (
            lambda: traffic.current_split(s, other, "m"),
            lambda: traffic.set_split(s, other, "m", {1: 100}, Caller()),
            lambda: traffic.rollback(s, other, "m", Caller()),
            lambda: traffic.history(s, other, "m"),
        ):
            with pytest.raises(NotFound, match="model 'm' not found"):
                call()


def test_deleting_the_model_removes_its_split_but_keeps_the_trail_apart(db: Database, acme):
    tenant, caller = acme
    add_deployed_version(db, tenant, "m", "a")
    with db.session() as s:
        traffic.set_split(s, tenant, "m", {1: 100}, caller)
        model_store.delete_model(s, tenant, "m")
    add_deployed_version(db, tenant, "m", "b")  # the same name again: a new model with a fresh trail
    with db.session() as s:
        assert traffic.current_split(s, tenant, "m") is None
        assert traffic.history(s, tenant, "m") == []
