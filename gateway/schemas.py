"""Request and response bodies of the management API, in families: `...Create` is what a client sends,
`...Public` what it gets back. OIP bodies are not here: their tensors are decoded by `tensor_codec`."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from luminal.gateway.store.tables import Deployment, Model, ModelVersion
from luminal.gateway.tensor_codec import oip_datatype, oip_shape

# Names appear in URLs (/v2/models/{name}); this keeps them path-safe and readable.
MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"


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
    version: int | None = Field(default=None, ge=1, description="the model version; the newest when omitted")
    gpu_type: str = Field(default="cpu", max_length=32)
    # Batching and scaling settings, stored now and used by the scheduler and provisioner slices.
    max_batch_size: int = Field(default=8, ge=1, le=1024)
    max_queue_delay_ms: int = Field(default=5, ge=0, le=60_000)
    min_replicas: int = Field(default=0, ge=0, le=64)
    max_replicas: int = Field(default=1, ge=1, le=64)

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
    status: str  # compiling | ready | failed
    error: str | None
    endpoint: str  # the OIP path that serves it
    created_at: dt.datetime
    updated_at: dt.datetime

    @classmethod
    def of(cls, row: Deployment) -> DeploymentPublic:
        name, version = row.model_version.model.name, row.model_version.version
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
            status=row.status,
            error=row.error,
            endpoint=f"/v2/models/{name}/versions/{version}/infer",
            created_at=row.created_at,
            updated_at=row.updated_at,
        )
