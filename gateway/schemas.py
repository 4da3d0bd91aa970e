"""Request and response bodies of the management API, in families: `...Create` is what a client sends,
`...Public` what it gets back. OIP bodies are not here: their tensors are decoded by `tensor_codec`."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field, model_validator

from luminal.gateway.tensor_codec import oip_datatype, oip_shape
from luminal.scheduler.generation.chunked_prefill import PREFILL_CHUNK
from luminal.scheduler.generation.waiting import MAX_WAITING
from luminal.store.deployments import READY, UNSCHEDULABLE
from luminal.store.tables import ApiKey, Deployment, Model, ModelVersion

# Names appear in URLs (/v2/models/{name}); this keeps them path-safe and readable.
MAX_MODEL_NAME_CHARS = 128
MODEL_NAME_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9_.\-]{{0,{MAX_MODEL_NAME_CHARS - 1}}}$"
# A name in a path is only looked up, so any text may ask (and get a 404), but none longer than a name can be.
ModelNameInPath = Annotated[str, Path(max_length=MAX_MODEL_NAME_CHARS, description="the model's name")]


class TensorSpec(BaseModel):
    name: str
    datatype: str  # the OIP name: FP32, INT64, ...
    shape: list[int]  # -1 for a symbolic dim


def tensor_specs(entries: list[dict[str, Any]]) -> list[TensorSpec]:
    return [TensorSpec(name=e["name"], datatype=oip_datatype(e["dtype"]), shape=oip_shape(e["shape"])) for e in entries]


class ModelVersionPublic(BaseModel):
    version: int
    sha256: str
    size_bytes: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    created_at: dt.datetime

    @classmethod
    def of(cls, row: ModelVersion) -> ModelVersionPublic:
        return cls(
            version=row.version,
            sha256=row.sha256,
            size_bytes=row.size_bytes,
            inputs=tensor_specs(row.signature["inputs"]),
            outputs=tensor_specs(row.signature["outputs"]),
            created_at=row.created_at,
        )


class UploadPublic(ModelVersionPublic):
    model: str
    created: bool  # False when the same bytes were already this model's version (deduplicated by sha256)


class ModelPublic(BaseModel):
    name: str
    versions: list[ModelVersionPublic]
    created_at: dt.datetime

    @classmethod
    def of(cls, row: Model) -> ModelPublic:
        return cls(name=row.name, versions=[ModelVersionPublic.of(v) for v in row.versions], created_at=row.created_at)


class DeploymentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt setting is an error, not silently the default

    model: str = Field(pattern=MODEL_NAME_PATTERN)
    version: int | None = Field(default=None, ge=1, le=10**9, description="the model version; the newest when omitted")
    gpu_type: str = Field(default="cpu", max_length=32)
    # Batching and scaling settings, stored now and used by the scheduler and provisioner slices.
    max_batch_size: int = Field(default=8, ge=1, le=1024)
    max_queue_delay_ms: int = Field(default=5, ge=0, le=60_000)
    min_replicas: int = Field(default=0, ge=0, le=64)
    max_replicas: int = Field(default=1, ge=1, le=64)
    # A language model's generation engine (ignored for other models): prompt tokens prefilled per round, a
    # chunk program run each (a round delays every running sequence's next token), capped by the compiled
    # chunk graph's size; and how many sequences may wait for a place in the batch (past it a 429).
    prefill_chunk: int = Field(default=PREFILL_CHUNK, ge=1, le=8192)
    max_waiting: int = Field(default=MAX_WAITING, ge=0, le=100_000)

    @model_validator(mode="after")
    def _replicas_ordered(self) -> DeploymentCreate:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas {self.min_replicas} exceeds max_replicas {self.max_replicas}")
        return self


class DeploymentPublic(BaseModel):
    id: int
    model: str
    version: int
    gpu_type: str
    target: str
    max_batch_size: int
    max_queue_delay_ms: int
    min_replicas: int
    max_replicas: int
    prefill_chunk: int
    max_waiting: int
    status: str  # compiling | ready | failed | unschedulable (compiled, but no worker here runs its gpu_type)
    error: str | None  # why it failed or is unschedulable
    endpoint: str  # the OIP path that serves it
    created_at: dt.datetime
    updated_at: dt.datetime

    @classmethod
    def of(cls, row: Deployment, unschedulable: str | None = None) -> DeploymentPublic:
        """`unschedulable`: why no worker can run its GPU type (the provisioner's word); a ready deployment then
        shows `unschedulable` with that reason, since it will answer no request."""
        name, version = row.model_version.model.name, row.model_version.version
        status, error = row.status, row.error
        if status == READY and unschedulable is not None:
            status, error = UNSCHEDULABLE, unschedulable
        return cls(
            id=row.id,
            model=name,
            version=version,
            gpu_type=row.gpu_type,
            target=row.target,
            max_batch_size=row.max_batch_size,
            max_queue_delay_ms=row.max_queue_delay_ms,
            min_replicas=row.min_replicas,
            max_replicas=row.max_replicas,
            prefill_chunk=row.prefill_chunk,
            max_waiting=row.max_waiting,
            status=status,
            error=error,
            endpoint=f"/v2/models/{name}/versions/{version}/infer",
            created_at=row.created_at,
            updated_at=row.updated_at,
        )


def _limits_of_create(field: str) -> list[Any]:
    """The constraints DeploymentCreate puts on `field`: an update can never store what a create would refuse."""
    return DeploymentCreate.model_fields[field].metadata


class DeploymentUpdate(BaseModel):
    """A PATCH: only the fields given change. Whether min_replicas <= max_replicas holds is checked again
    against the stored values, since the body may set only one of them."""

    model_config = ConfigDict(extra="forbid")

    max_batch_size: Annotated[int | None, *_limits_of_create("max_batch_size")] = None
    max_queue_delay_ms: Annotated[int | None, *_limits_of_create("max_queue_delay_ms")] = None
    min_replicas: Annotated[int | None, *_limits_of_create("min_replicas")] = None
    max_replicas: Annotated[int | None, *_limits_of_create("max_replicas")] = None

    @model_validator(mode="after")
    def _some_change_no_nulls(self) -> DeploymentUpdate:
        if not self.model_fields_set:
            raise ValueError(f"give at least one of {sorted(type(self).model_fields)}")
        nulls = sorted(f for f in self.model_fields_set if getattr(self, f) is None)
        if nulls:
            raise ValueError(f"{nulls} may not be null; leave a field out to keep its value")
        if self.min_replicas is not None and self.max_replicas is not None and self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas {self.min_replicas} exceeds max_replicas {self.max_replicas}")
        return self

    def changes(self) -> dict[str, int]:
        return {f: getattr(self, f) for f in self.model_fields_set}


# Row ids are PostgreSQL `integer`s: a larger id in a path is refused as a 422, not sent to the database
# (where it would overflow the parameter, a 500).
MAX_ROW_ID = 2**31 - 1
RowId = Annotated[int, Path(ge=1, le=MAX_ROW_ID)]
# Control characters in a name could rewrite a terminal that lists it; everything else is allowed.
KEY_NAME_PATTERN = r"^[^\x00-\x1f\x7f]+$"


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=128, pattern=KEY_NAME_PATTERN)


class KeyPublic(BaseModel):
    """A key as listings show it: never the key or its hash, only its first characters (`prefix`)."""

    id: int
    name: str | None
    prefix: str | None  # None for keys created before keys had prefixes
    created_at: dt.datetime
    revoked_at: dt.datetime | None

    @classmethod
    def of(cls, row: ApiKey) -> KeyPublic:
        return cls(id=row.id, name=row.name, prefix=row.prefix, created_at=row.created_at, revoked_at=row.revoked_at)


class KeyCreated(KeyPublic):
    key: str  # shown only in this answer
