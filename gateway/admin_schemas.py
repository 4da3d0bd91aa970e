"""Bodies of the admin API (`/v1/admin/tenants`): what an operator sends (`...Create`, `...Update`) and gets back."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict, Field, model_validator

from luminal.gateway.schemas import KEY_NAME_PATTERN, MODEL_NAME_PATTERN
from luminal.store.tenant_admin import QUOTA_FIELDS, TenantSummary

# Bounds keep a typo from storing an absurd quota (and every value within a PostgreSQL integer).
MAX_COUNT_QUOTA = 100_000
MAX_RATE_QUOTA = 1_000_000.0


class TenantQuotas(BaseModel):
    """Quotas; null (or left out at creation) is no limit."""

    model_config = ConfigDict(extra="forbid")  # a misspelt quota is an error, not silently no limit

    max_deployments: int | None = Field(default=None, ge=0, le=MAX_COUNT_QUOTA)
    # Workers of all the tenant's deployments together.
    max_replicas: int | None = Field(default=None, ge=0, le=MAX_COUNT_QUOTA)
    # Every request made with the tenant's keys counts; a second's worth may come at once.
    max_requests_per_second: float | None = Field(default=None, gt=0, le=MAX_RATE_QUOTA)


class TenantCreate(TenantQuotas):
    # Path-safe like model names, so it reads the same in a URL, a log line or a terminal.
    name: str = Field(pattern=MODEL_NAME_PATTERN)


class QuotaUpdate(TenantQuotas):
    """A PATCH: only the quotas given change; null lifts one."""

    @model_validator(mode="after")
    def _some_change(self) -> QuotaUpdate:
        if not self.model_fields_set:
            raise ValueError(f"give at least one of {list(QUOTA_FIELDS)}")
        return self

    def changes(self) -> dict[str, float | None]:
        return {f: getattr(self, f) for f in self.model_fields_set}


class Suspension(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Shown to the tenant in every refusal, so it must not carry control characters into a terminal.
    reason: str | None = Field(default=None, min_length=1, max_length=256, pattern=KEY_NAME_PATTERN)


class TenantPublic(BaseModel):
    id: int
    name: str
    created_at: dt.datetime
    suspended_at: dt.datetime | None
    suspension_reason: str | None
    quotas: TenantQuotas
    deployments: int
    active_keys: int

    @classmethod
    def of(cls, summary: TenantSummary) -> TenantPublic:
        t = summary.tenant
        return cls(
            id=t.id,
            name=t.name,
            created_at=t.created_at,
            suspended_at=t.suspended_at,
            suspension_reason=t.suspension_reason,
            quotas=TenantQuotas(**{f: getattr(t, f) for f in QUOTA_FIELDS}),
            deployments=summary.deployments,
            active_keys=summary.active_keys,
        )


class TenantCreated(TenantPublic):
    key: str  # the tenant's first API key, shown only in this answer
