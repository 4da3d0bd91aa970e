"""The metadata tables (SQLAlchemy 2 typed ORM). Alembic's migrations under store/migrations create them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    func,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class UtcDateTime(TypeDecorator):
    """Timestamps are UTC everywhere: SQLite keeps no time zone, so one read back from it gets UTC attached
    (PostgreSQL's timestamptz already carries it)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_result_value(self, value, dialect):
        return value.replace(tzinfo=dt.UTC) if value is not None and value.tzinfo is None else value


class Base(DeclarativeBase):
    pass


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _now() -> Mapped[dt.datetime]:
    # Set in Python too, so a new row knows its time without a round trip to read the server default back.
    return mapped_column(UtcDateTime(), default=utcnow, server_default=func.now())


class Tenant(Base):
    __tablename__ = "tenants"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    created_at: Mapped[dt.datetime] = _now()
    # Set by an operator: the tenant's keys are refused and its deployments drain to zero until resumed.
    suspended_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    suspension_reason: Mapped[str | None] = mapped_column(String(256), nullable=True)
    # Quotas; NULL is no limit. Replicas count the workers of all the tenant's deployments together.
    max_deployments: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_replicas: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_requests_per_second: Mapped[float | None] = mapped_column(Float, nullable=True)


class ApiKey(Base):
    """A key is stored only as its sha256: the key itself is shown once, when it is created."""

    __tablename__ = "api_keys"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime] = _now()
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # The owner's label, and the key's first characters so a listing can say which key is which without
    # holding the secret. NULL for keys older than migration 0004.
    name: Mapped[str | None] = mapped_column(String(128), nullable=True)
    prefix: Mapped[str | None] = mapped_column(String(16), nullable=True)


class Model(Base):
    """A tenant's named model; its uploads are its versions. Names are unique per tenant, not globally."""

    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[dt.datetime] = _now()
    versions: Mapped[list[ModelVersion]] = relationship(
        back_populates="model", cascade="all, delete-orphan", passive_deletes=True, order_by="ModelVersion.version"
    )


class ModelVersion(Base):
    """One uploaded `.lgraph`: the file lives in the artifact store under its sha256."""

    __tablename__ = "model_versions"
    __table_args__ = (UniqueConstraint("model_id", "version"), UniqueConstraint("model_id", "sha256"))
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    version: Mapped[int] = mapped_column(Integer)  # 1, 2, ... per model
    sha256: Mapped[str] = mapped_column(String(64), index=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    artifact_key: Mapped[str] = mapped_column(String(256))
    # The graph's inputs and outputs as the graph file's manifest states them (names, dtypes, JSON shapes).
    signature: Mapped[dict[str, Any]] = mapped_column(JSON)
    symbols: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[dt.datetime] = _now()
    model: Mapped[Model] = relationship(back_populates="versions")
    deployment: Mapped[Deployment | None] = relationship(
        back_populates="model_version", cascade="all, delete-orphan", passive_deletes=True
    )


class Deployment(Base):
    """A model version compiled for a target and served. One per model version, so `/v2/models/{name}/versions/
    {v}` names exactly one deployment."""

    __tablename__ = "deployments"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    model_version_id: Mapped[int] = mapped_column(
        ForeignKey("model_versions.id", ondelete="CASCADE"), unique=True, index=True
    )
    gpu_type: Mapped[str] = mapped_column(String(32))
    target: Mapped[str] = mapped_column(String(32))
    max_batch_size: Mapped[int] = mapped_column(Integer)
    max_queue_delay_ms: Mapped[int] = mapped_column(Integer)
    min_replicas: Mapped[int] = mapped_column(Integer)
    max_replicas: Mapped[int] = mapped_column(Integer)
    # A language model's generation engine: prompt tokens prefilled per round, and the waiting line's bound.
    prefill_chunk: Mapped[int] = mapped_column(Integer, default=256, server_default="256")
    max_waiting: Mapped[int] = mapped_column(Integer, default=256, server_default="256")
    status: Mapped[str] = mapped_column(String(16))  # compiling | ready | failed
    error: Mapped[str | None] = mapped_column(Text, nullable=True)  # the compiler's message when failed
    program_key: Mapped[str | None] = mapped_column(String(256), nullable=True)  # the compiled .lprog artifact
    created_at: Mapped[dt.datetime] = _now()
    updated_at: Mapped[dt.datetime] = _now()
    model_version: Mapped[ModelVersion] = relationship(back_populates="deployment")
    lora_adapters: Mapped[list[LoraAdapterRow]] = relationship(
        back_populates="deployment", cascade="all, delete-orphan", passive_deletes=True, order_by="LoraAdapterRow.id"
    )


class LoraAdapterRow(Base):
    """A LoRA adapter added to a live language-model deployment: a model name of its tenant (as model names are),
    its checked factors stored as an artifact (luminal/lora_package.py's entry format)."""

    __tablename__ = "lora_adapters"
    __table_args__ = (UniqueConstraint("tenant_id", "name", name="uq_lora_adapters_tenant_name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    artifact_key: Mapped[str] = mapped_column(String(256))
    created_at: Mapped[dt.datetime] = _now()
    deployment: Mapped[Deployment] = relationship(back_populates="lora_adapters")


class TrafficSplitRow(Base):
    """How requests naming a model without a version are shared among its versions: version (as text, JSON's
    key type) -> percent, summing to 100. No row: the newest deployed version answers them all."""

    __tablename__ = "traffic_splits"
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    split: Mapped[dict[str, int]] = mapped_column(JSON)
    updated_at: Mapped[dt.datetime] = _now()


class TrafficChangeRow(Base):
    """One change of a model's traffic split, appended, never edited: the audit trail, and what a rollback
    restores (the `old_split` of the newest change). Its name is copied in and its id set to NULL when the model
    is deleted: the trail outlives the model, as billing history does, and a model made again under the same name
    starts a fresh one (an id alone would not do: SQLite gives a deleted row's id to the next row)."""

    __tablename__ = "traffic_changes"
    __table_args__ = (Index("ix_traffic_changes_model", "model_id", "id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    model_id: Mapped[int | None] = mapped_column(ForeignKey("models.id", ondelete="SET NULL"), nullable=True)
    model_name: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(16))  # set | rollback | clear
    old_split: Mapped[dict[str, int] | None] = mapped_column(JSON, nullable=True)  # None: no split before
    new_split: Mapped[dict[str, int] | None] = mapped_column(JSON, nullable=True)  # None: the split was cleared
    # Who: the API key that made the change (its id and label copied, so the trail survives a revoked key).
    api_key_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    api_key_name: Mapped[str | None] = mapped_column(String(128), nullable=True)
    changed_at: Mapped[dt.datetime] = _now()


class UsageRecordRow(Base):
    """One executed batch, billed once (`batch_id` is unique), holding the requests it billed: each request is
    billed once in all (`billed_requests`), so a batch whose requests were all billed before writes no row.
    Times are wall-clock epoch seconds as floats, so a report buckets them by floor division alike on SQLite and
    PostgreSQL. The deployment is not a foreign key, and its model's name and version are copied in: billing
    history outlives a deleted deployment."""

    __tablename__ = "usage_records"
    __table_args__ = (Index("ix_usage_records_tenant_started", "tenant_id", "started_at"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    batch_id: Mapped[str] = mapped_column(String(64), unique=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    deployment_id: Mapped[int] = mapped_column(Integer)
    model_name: Mapped[str | None] = mapped_column(String(128), nullable=True)
    model_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    worker_id: Mapped[str] = mapped_column(String(128))
    gpu_type: Mapped[str] = mapped_column(String(32))
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float] = mapped_column(Float)
    # The billed GPU-seconds: ended_at - started_at, or the shares of the requests billed here when some of the
    # batch's requests had already been billed by an earlier run (a reclaimed request re-run elsewhere).
    seconds: Mapped[float] = mapped_column(Float)
    batch_size: Mapped[int] = mapped_column(Integer)  # requests billed by this record (those of request_ids)
    request_ids: Mapped[list[str]] = mapped_column(JSON)
    request_rows: Mapped[list[int]] = mapped_column(JSON)  # each request's rows, in the order of request_ids
    price_per_second: Mapped[float] = mapped_column(Float)  # the price when recorded; later changes bill new work
    cost: Mapped[float] = mapped_column(Float)
    # A language model's sequence (one request per record): its prompt and generated tokens; 0 for tensor batches.
    prompt_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    completion_tokens: Mapped[int] = mapped_column(Integer, server_default="0")


class BilledRequest(Base):
    """Each billed request once: the key that makes billing idempotent per request. A reclaimed request re-run by
    another worker arrives in a new batch with a new batch id, and this table is what keeps it from being billed
    again (see scheduler/ledger.py). Written in the transaction that writes its usage record."""

    __tablename__ = "billed_requests"
    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    # The record that billed it; a deleted tenant takes its records and so these rows with them.
    usage_record_id: Mapped[int] = mapped_column(ForeignKey("usage_records.id", ondelete="CASCADE"), index=True)


class Prediction(Base):
    """An asynchronous inference: queued, running, then succeeded (with the OIP response document) or failed
    (with the reason). Its inputs are never stored: they live in the gateway task that runs it, which is why a
    restart fails the predictions it cut off instead of resuming them."""

    __tablename__ = "predictions"
    # Listing is "a tenant's newest first", paged by (created_at, id).
    __table_args__ = (Index("ix_predictions_tenant_created", "tenant_id", "created_at"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # random hex: ids are not guessable
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    # Kept when the deployment is deleted: the prediction's outcome is still the tenant's record.
    deployment_id: Mapped[int | None] = mapped_column(ForeignKey("deployments.id", ondelete="SET NULL"), nullable=True)
    model: Mapped[str] = mapped_column(String(128))
    version: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), index=True)  # queued | running | succeeded | failed
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    billed_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    # The OIP response document as JSON text, or (when large) the artifact holding it; see gateway/predictions.py.
    output: Mapped[str | None] = mapped_column(Text, nullable=True)
    output_key: Mapped[str | None] = mapped_column(String(64), nullable=True)
    webhook_url: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    webhook_status: Mapped[str | None] = mapped_column(String(16), nullable=True)  # pending | delivered | failed
    webhook_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[dt.datetime] = _now()
    started_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    completed_at: Mapped[dt.datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # The gateway replica whose task runs it (see GatewayReplica); NULL for predictions older than migration 0008.
    owner: Mapped[str | None] = mapped_column(String(128), nullable=True)


class Lease(Base):
    """A role only one gateway may play at a time (the provisioner): held by `holder` until `expires_at` (wall-clock
    epoch seconds), renewed by it before then, taken by another only after (see store/leases.py)."""

    __tablename__ = "leases"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128))
    expires_at: Mapped[float] = mapped_column(Float)


class GatewayReplica(Base):
    """A running gateway's heartbeat (wall-clock epoch seconds): one whose beat is too old has died, and the
    predictions it owned are failed by the others."""

    __tablename__ = "gateway_replicas"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    beat_at: Mapped[float] = mapped_column(Float)
