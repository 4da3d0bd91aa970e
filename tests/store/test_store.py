"""The store layer on SQLite and PostgreSQL: migrations, hashed keys, tenant scoping, versions, shared blobs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import inspect, select

from luminal.store import models as model_store
from luminal.store import tenants
from luminal.store.artifacts import LocalArtifactStore
from luminal.store.database import Database, migrate
from luminal.store.errors import NotFound
from luminal.store.models import UploadedGraph
from luminal.store.tables import ApiKey

ROOT = Path(__file__).resolve().parents[2]
TABLES = {"tenants", "api_keys", "models", "model_versions", "deployments"}
SIGNATURE = {"inputs": [{"name": "x", "shape": [4], "dtype": "float32"}], "outputs": []}


def graph(sha: str) -> UploadedGraph:
    return UploadedGraph(sha, 10, sha, SIGNATURE, {})


def test_alembic_upgrade_head_creates_the_schema(database_url: str):
    # The command-line path operators use, not only the app's call at start.
    alembic = [sys.executable, "-m", "alembic", "-c", str(ROOT / "alembic.ini"), "-x", f"url={database_url}"]
    subprocess.run([*alembic, "upgrade", "head"], check=True, cwd=ROOT, capture_output=True)
    # `alembic check` compares the migrated schema with the ORM tables: they must agree (no pending migration).
    check = subprocess.run([*alembic, "check"], cwd=ROOT, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    database = Database(database_url)
    assert TABLES <= set(inspect(database.engine).get_table_names())
    migrate(database.engine)  # a second run at start is a no-op
    database.dispose()


def test_keys_are_stored_only_as_hashes(db: Database):
    with db.session() as s:
        tenant, key = tenants.create_tenant(s, "acme")
    with db.session() as s:
        stored = s.scalars(select(ApiKey)).one()
        assert stored.key_hash == tenants.hash_key(key)
        stored_text = " ".join(str(getattr(stored, c.key)) for c in ApiKey.__table__.columns)
        assert key[len(tenants.KEY_PREFIX) :][:8] not in stored_text  # no part of the secret is kept
        assert tenants.tenant_for_key(s, key).id == tenant.id
        assert tenants.tenant_for_key(s, key + "x") is None
        assert tenants.revoke_key(s, tenant, key)
    with db.session() as s:
        assert tenants.tenant_for_key(s, key) is None


def test_bootstrap_creates_the_first_tenant_once(db: Database):
    with db.session() as s:
        key = tenants.ensure_bootstrap_tenant(s, None)
    assert key and key.startswith(tenants.KEY_PREFIX)
    with db.session() as s:
        assert tenants.ensure_bootstrap_tenant(s, None) is None  # later starts print nothing
        assert tenants.tenant_count(s) == 1


def test_versions_are_numbered_deduplicated_and_tenant_scoped(db: Database):
    with db.session() as s:
        acme, _ = tenants.create_tenant(s, "acme")
        other, _ = tenants.create_tenant(s, "other")
    with db.session() as s:
        v1, created1 = model_store.add_version(s, acme, "m", graph("a" * 64))
        again, created_again = model_store.add_version(s, acme, "m", graph("a" * 64))
        v2, _ = model_store.add_version(s, acme, "m", graph("b" * 64))
    assert (v1.version, created1, again.id, created_again, v2.version) == (1, True, v1.id, False, 2)
    with db.session() as s:
        assert model_store.get_version(s, acme, "m").version == 2
        assert model_store.get_version(s, acme, "m", 1).sha256 == "a" * 64
        with pytest.raises(NotFound):
            model_store.get_model(s, other, "m")
        with pytest.raises(NotFound):
            model_store.get_version(s, acme, "m", 3)
        assert model_store.list_models(s, other) == []


def test_delete_keeps_blobs_another_tenant_uses(db: Database):
    with db.session() as s:
        acme, _ = tenants.create_tenant(s, "acme")
        other, _ = tenants.create_tenant(s, "other")
        model_store.add_version(s, acme, "m", graph("a" * 64))
        model_store.add_version(s, acme, "m", graph("c" * 64))
        model_store.add_version(s, other, "n", graph("a" * 64))
    with db.session() as s:
        assert model_store.delete_model(s, acme, "m") == ["c" * 64]
    with db.session() as s:
        assert [m.name for m in model_store.list_models(s, other)] == ["n"]
        with pytest.raises(NotFound):
            model_store.get_model(s, acme, "m")


def test_artifact_store_is_content_addressed_and_atomic(tmp_path: Path):
    store = LocalArtifactStore(tmp_path / "a")
    key = store.put_bytes(b"hello")
    assert store.local_path(key).read_bytes() == b"hello" and store.put_bytes(b"hello") == key
    spooled = tmp_path / "spool"
    spooled.write_bytes(b"hello")
    assert store.put_file(spooled, key) == key and not spooled.exists()  # same content: the spool file goes
    assert [p.name for p in (tmp_path / "a").rglob("*") if p.is_file()] == [key]  # no temporary files remain
    store.delete(key)
    assert not store.exists(key)
    with pytest.raises(ValueError):
        store.local_path("../../etc/passwd")
