"""Everything a worker needs to serve one deployment, read from the metadata store in one query.

A plain value, so the provisioner can hand it to a thread or (as command-line arguments and the database URL)
to a worker process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from luminal.store.deployments import READY
from luminal.store.tables import Deployment, ModelVersion

# The signature kind of a deployment made from a language-model package (gateway/uploads.py marks it): its workers
# hold a generation engine and take sequences (llm_worker.py) instead of batching requests.
LLM_KIND = "llm"


@dataclass(frozen=True)
class WorkerSpec:
    deployment_id: int
    tenant_id: int
    model: str
    version: int
    program_key: str
    gpu_type: str
    max_batch_size: int
    max_queue_delay_ms: int
    min_replicas: int
    max_replicas: int
    signature: dict[str, Any]
    symbols: dict[str, Any]
    # A language model's engine settings: prompt tokens prefilled per round, and its waiting line's bound.
    prefill_chunk: int = 256
    max_waiting: int = 256
    # LoRA adapters added to the live deployment, (name, artifact key of their factors): a worker installs them
    # as it loads. Not in serves_like: a running worker follows them on its deployment's board (live_adapters.py).
    lora_adapters: tuple[tuple[str, str], ...] = ()

    @property
    def is_language_model(self) -> bool:
        return self.signature.get("kind") == LLM_KIND

    def serves_like(self, other: WorkerSpec) -> bool:
        """Whether a worker started with `other` serves as this spec asks (replica bounds do not matter to it;
        the program and the batching settings do, and a language model's prefill chunk)."""
        fields = ("program_key", "gpu_type", "max_batch_size", "max_queue_delay_ms", "prefill_chunk")
        return all(getattr(self, f) == getattr(other, f) for f in fields)


def _spec(row: Deployment) -> WorkerSpec:
    mv = row.model_version
    return WorkerSpec(
        deployment_id=row.id,
        tenant_id=row.tenant_id,
        model=mv.model.name,
        version=mv.version,
        program_key=row.program_key,
        gpu_type=row.gpu_type,
        max_batch_size=row.max_batch_size,
        max_queue_delay_ms=row.max_queue_delay_ms,
        min_replicas=row.min_replicas,
        max_replicas=row.max_replicas,
        signature=mv.signature,
        symbols=mv.symbols,
        prefill_chunk=row.prefill_chunk,
        max_waiting=row.max_waiting,
        lora_adapters=tuple((a.name, a.artifact_key) for a in row.lora_adapters),
    )


def _ready_query():
    return (
        select(Deployment)
        .options(joinedload(Deployment.model_version).joinedload(ModelVersion.model))
        .where(Deployment.status == READY, Deployment.program_key.is_not(None))
    )


def ready_specs(session: Session) -> list[WorkerSpec]:
    """Every deployment that can serve (all tenants: the provisioner works for the whole platform)."""
    return [_spec(row) for row in session.scalars(_ready_query().order_by(Deployment.id))]


def spec_for(session: Session, deployment_id: int) -> WorkerSpec | None:
    row = session.scalars(_ready_query().where(Deployment.id == deployment_id)).one_or_none()
    return None if row is None else _spec(row)
