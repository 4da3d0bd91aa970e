"""The platform's one configuration: every field read from the environment with the prefix `LUMINAL_`."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 2**20


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LUMINAL_", extra="ignore")

    # Everything the embedded platform writes (SQLite file, artifacts, upload spool) lives under one folder,
    # so one path is all that must survive a restart or be wiped in a test.
    data_dir: Path = Field(default=Path.home() / ".luminal", description="root of the platform's local state")
    # Empty means the embedded default: a SQLite file under data_dir. Set it to postgresql+psycopg://... when
    # several gateway replicas share one metadata store.
    database_url: str = Field(default="", description="SQLAlchemy URL of the metadata database")
    # Uploads are streamed to disk and refused past this size (413) so a client cannot fill the disk; 2 GiB
    # holds a ~1B-parameter float16 model. The graph format's own cap (tens of GiB) is far above it.
    max_upload_bytes: int = Field(default=2048 * MiB, gt=0, description="largest accepted .lgraph upload")
    # An inference request's body (JSON or binary tensors) is read into memory, so it has its own, smaller cap.
    max_request_bytes: int = Field(default=64 * MiB, gt=0, description="largest accepted inference request body")
    # Billing multiplies billed GPU-seconds by these; the keys are also the GPU types a deployment may ask for.
    gpu_prices_per_second: dict[str, float] = Field(
        default={"cpu": 0.00001, "t4": 0.000164, "a10g": 0.000306, "l4": 0.000222, "a100": 0.000833, "h100": 0.00123},
        description="USD per GPU-second by GPU type",
    )
    # The first start creates a tenant with this key when set (else a random one, printed once), so scripted
    # setups and tests know the key in advance.
    bootstrap_key: str | None = Field(default=None, min_length=20, description="API key of the first tenant")
    # Compiles are CPU-heavy and run beside request handling; one at a time keeps inference responsive.
    compile_workers: int = Field(default=1, ge=1, le=64, description="concurrent compile jobs")
    # Empty means the embedded default: in-memory queues inside this process. Several gateway replicas and
    # workers on other machines share requests through Redis Streams instead (the worker registry too).
    queue_url: str = Field(
        default="",
        description="request queues: empty = in-memory queues of the embedded platform; "
        "redis://host:port/db = Redis Streams",
    )

    @cached_property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'luminal.db'}"

    @property
    def artifacts_dir(self) -> Path:
        return self.data_dir / "artifacts"

    @property
    def spool_dir(self) -> Path:
        # Beside the artifacts (same filesystem), so a validated upload moves into place with one rename.
        return self.data_dir / "spool"
