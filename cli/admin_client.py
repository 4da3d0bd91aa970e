"""The admin API (`/v1/admin/tenants`) as `luminal admin` uses it, holding the operator's admin token."""

from __future__ import annotations

from typing import Any

from luminal.cli.client import ApiClient, ClientError

PATH = "/v1/admin/tenants"


class AdminClient(ApiClient):
    def __init__(self, url: str, admin_token: str | None, timeout: float = 60):
        if not admin_token:
            raise ClientError("no admin token: pass --admin-token or set LUMINAL_ADMIN_TOKEN")
        super().__init__(url, admin_token, timeout)

    def create_tenant(self, name: str, **quotas: Any) -> dict:
        """The new tenant, with its first API key under "key" (shown only in this answer)."""
        return self._call("POST", PATH, json={"name": name, **quotas})

    def list_tenants(self) -> list[dict]:
        return self._call("GET", PATH)

    def suspend_tenant(self, tenant_id: int, reason: str | None = None) -> dict:
        return self._call("POST", f"{PATH}/{tenant_id}/suspend", json={"reason": reason} if reason else {})

    def resume_tenant(self, tenant_id: int) -> dict:
        return self._call("POST", f"{PATH}/{tenant_id}/resume")

    def set_quotas(self, tenant_id: int, **changes: Any) -> dict:
        """`changes` holds only the quotas to change; None lifts one."""
        return self._call("PATCH", f"{PATH}/{tenant_id}", json=changes)
