"""Migration 0005 on SQLite and PostgreSQL: the billing history written before it is indexed per request (each
request id pointing at the first record that billed it), and a downgrade removes the table again."""

from __future__ import annotations

from alembic import command
from sqlalchemy import insert, inspect, select

from luminal.store.database import Database, alembic_config
from luminal.store.tables import BilledRequest, Tenant, UsageRecordRow


def migrate_to(db: Database, revision: str, downgrade: bool = False) -> None:
    cfg = alembic_config(db.engine.url.render_as_string(hide_password=False))
    with db.engine.begin() as connection:
        cfg.attributes["connection"] = connection
        (command.downgrade if downgrade else command.upgrade)(cfg, revision)


def record(batch_id: str, tenant_id: int, request_ids: list[str]) -> dict:
    return dict(batch_id=batch_id, tenant_id=tenant_id, deployment_id=1, worker_id="w", gpu_type="cpu",
                started_at=1.0, ended_at=2.0, seconds=1.0, batch_size=len(request_ids), request_ids=request_ids,
                request_rows=[1] * len(request_ids), price_per_second=1.0, cost=1.0)  # fmt: skip


def test_the_billing_history_is_indexed_per_request(database_url: str):
    db = Database(database_url)
    migrate_to(db, "0004")
    with db.session() as s:
        tenant_id = s.execute(insert(Tenant).values(name="acme").returning(Tenant.id)).scalar_one()
        # b2 re-billed r2 (a reclaimed request, before this revision): the index keeps r2's first record.
        for batch_id, ids in [("b1", ["r1", "r2"]), ("b2", ["r2", "r3"]), ("b3", [])]:
            s.execute(insert(UsageRecordRow.__table__).values(record(batch_id, tenant_id, ids)))
    migrate_to(db, "0005")
    with db.session() as s:
        ids = dict(s.execute(select(UsageRecordRow.batch_id, UsageRecordRow.id)).all())
        index = dict(s.execute(select(BilledRequest.request_id, BilledRequest.usage_record_id)).all())
    assert index == {"r1": ids["b1"], "r2": ids["b1"], "r3": ids["b2"]}
    migrate_to(db, "0004", downgrade=True)
    assert "billed_requests" not in inspect(db.engine).get_table_names()
    db.dispose()
