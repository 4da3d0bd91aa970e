"""`luminal admin tenants ls | create NAME | suspend ID | resume ID | quota ID`: the operator's commands, through
the admin API. They take the gateway's admin token (--admin-token or $LUMINAL_ADMIN_TOKEN), never a tenant's
key, and `luminal login` never saves it: it acts on every tenant."""

from __future__ import annotations

from typing import Annotated

import typer

from luminal.cli.admin_client import AdminClient
from luminal.cli.common import UrlOption, err, fail, out, print_table, short_time
from luminal.cli.config import opened, resolve

app = typer.Typer(help="Operate the platform with its admin token.", no_args_is_help=True)
tenants = typer.Typer(help="Create, list, suspend and resume tenants; set their quotas.", no_args_is_help=True)
app.add_typer(tenants, name="tenants")

TokenOption = Annotated[
    str | None, typer.Option("--admin-token", envvar="LUMINAL_ADMIN_TOKEN", help="the gateway's admin token")
]
TenantId = Annotated[int, typer.Argument(min=1, help="the tenant's id (see `luminal admin tenants ls`)")]
MaxDeployments = Annotated[int | None, typer.Option(help="most deployments")]
MaxReplicas = Annotated[int | None, typer.Option(help="most workers across its deployments")]
MaxRps = Annotated[float | None, typer.Option("--max-rps", help="most requests per second")]
NO_LIMIT = ("none", "unlimited")


def _admin(url: str | None, admin_token: str | None):
    return opened(lambda: AdminClient(resolve(url, None).url, admin_token))


@tenants.command("ls")
def list_tenants(url: UrlOption = None, admin_token: TokenOption = None) -> None:
    """Every tenant with its standing, what it holds and its quotas ('-': no limit)."""
    with _admin(url, admin_token) as client:
        found = client.list_tenants()
    rows = [
        (t["id"], t["name"], "suspended" if t["suspended_at"] else "active", t["deployments"], t["active_keys"],
         t["quotas"]["max_deployments"], t["quotas"]["max_replicas"], _rate(t["quotas"]["max_requests_per_second"]),
         short_time(t["created_at"]))
        for t in found
    ]  # fmt: skip
    columns = ("ID", "NAME", "STATUS", "DEPLOYMENTS", "KEYS", "MAX DEPLOYMENTS", "MAX REPLICAS", "MAX RPS", "CREATED")
    print_table(columns, rows, empty="No tenants.")
    for t in found:
        if t["suspended_at"]:
            why = f": {t['suspension_reason']}" if t["suspension_reason"] else ""
            out.print(f"tenant {t['id']} suspended since {short_time(t['suspended_at'])}{why}", markup=False)


def _rate(per_second: float | None) -> str | None:
    return None if per_second is None else f"{per_second:g}"


@tenants.command("create")
def create_tenant(
    name: Annotated[str, typer.Argument(help="the tenant's name (letters, digits, '_', '.', '-')")],
    max_deployments: MaxDeployments = None,
    max_replicas: MaxReplicas = None,
    max_rps: MaxRps = None,
    url: UrlOption = None,
    admin_token: TokenOption = None,
) -> None:
    """Print the new tenant's first API key on stdout (alone, so `$(...)` captures it); it is never shown again."""
    quotas = {"max_deployments": max_deployments, "max_replicas": max_replicas, "max_requests_per_second": max_rps}
    with _admin(url, admin_token) as client:
        tenant = client.create_tenant(name, **{k: v for k, v in quotas.items() if v is not None})
    message = f"Created tenant {tenant['id']} ({tenant['name']}); its API key, shown only this once:"
    err.print(message, highlight=False, markup=False)
    out.print(tenant["key"], highlight=False, markup=False, soft_wrap=True)


@tenants.command("suspend")
def suspend_tenant(
    tenant_id: TenantId,
    reason: Annotated[str | None, typer.Option(help="shown to the tenant in every refusal")] = None,
    url: UrlOption = None,
    admin_token: TokenOption = None,
) -> None:
    """Refuse the tenant's keys; its deployments finish what they hold, then scale to zero."""
    with _admin(url, admin_token) as client:
        tenant = client.suspend_tenant(tenant_id, reason)
    out.print(f"Suspended tenant {tenant['id']} ({tenant['name']}).", highlight=False, markup=False)


@tenants.command("resume")
def resume_tenant(tenant_id: TenantId, url: UrlOption = None, admin_token: TokenOption = None) -> None:
    """The tenant's keys work again and its deployments scale again."""
    with _admin(url, admin_token) as client:
        tenant = client.resume_tenant(tenant_id)
    out.print(f"Resumed tenant {tenant['id']} ({tenant['name']}).", highlight=False, markup=False)


@tenants.command("quota")
def set_quotas(
    tenant_id: TenantId,
    max_deployments: Annotated[str | None, typer.Option(help="most deployments, or 'none'")] = None,
    max_replicas: Annotated[str | None, typer.Option(help="most workers across its deployments, or 'none'")] = None,
    max_rps: Annotated[str | None, typer.Option("--max-rps", help="most requests per second, or 'none'")] = None,
    url: UrlOption = None,
    admin_token: TokenOption = None,
) -> None:
    """Change any of the tenant's quotas; 'none' lifts one."""
    given = {"max_deployments": (max_deployments, int), "max_replicas": (max_replicas, int)}
    given["max_requests_per_second"] = (max_rps, float)
    changes = {k: _quota(k, raw, kind) for k, (raw, kind) in given.items() if raw is not None}
    if not changes:
        fail("nothing to change: give --max-deployments, --max-replicas or --max-rps")
    with _admin(url, admin_token) as client:
        tenant = client.set_quotas(tenant_id, **changes)
    q = {k: "none" if v is None else f"{v:g}" for k, v in tenant["quotas"].items()}
    limits = f"deployments {q['max_deployments']}, replicas {q['max_replicas']}, "
    limits += f"requests per second {q['max_requests_per_second']}"
    out.print(f"Tenant {tenant['id']} ({tenant['name']}) quotas: {limits}.", highlight=False, markup=False)


def _quota(name: str, raw: str, kind: type) -> int | float | None:
    if raw.strip().lower() in NO_LIMIT:
        return None
    try:
        return kind(raw)
    except ValueError:
        fail(f"--{name.replace('_', '-')}: expected a number or 'none', got {raw!r}")
