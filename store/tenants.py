"""Tenants and their API keys. A key is 256 random bits shown once; only its sha256 is stored.

A plain sha256 (not a slow password hash) is enough: the key is random, not a human-chosen password, so
there is nothing to brute-force from the hash, and lookup by hash stays one indexed query per request.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from luminal.store.errors import Conflict, NotFound
from luminal.store.tables import ApiKey, Tenant

KEY_PREFIX = "lm_"
# A listing shows the key's first characters so its owner can tell keys apart: "lm_" and 4 random characters
# reveal 24 of the key's 256 random bits, leaving nothing guessable.
SHOWN_CHARS = len(KEY_PREFIX) + 4


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_tenant(session: Session, name: str, key: str | None = None) -> tuple[Tenant, str]:
    """A new tenant with one API key (`key`, or a fresh random one); returns the tenant and the key."""
    tenant = Tenant(name=name)
    session.add(tenant)
    session.flush()
    return tenant, add_key(session, tenant, key)


def add_key(session: Session, tenant: Tenant, key: str | None = None) -> str:
    return create_key(session, tenant, key=key)[1]


def create_key(session: Session, tenant: Tenant, name: str | None = None, key: str | None = None) -> tuple[ApiKey, str]:
    """A new key for `tenant` (`key`, or a fresh random one); returns its row and the key, the only time the key
    is available: the row keeps its hash."""
    key = key or new_key()
    row = ApiKey(tenant_id=tenant.id, key_hash=hash_key(key), name=name, prefix=key[:SHOWN_CHARS])
    session.add(row)
    session.flush()
    return row, key


def list_keys(session: Session, tenant: Tenant) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).where(ApiKey.tenant_id == tenant.id).order_by(ApiKey.id)))


def revoke_key_id(session: Session, tenant: Tenant, key_id: int) -> ApiKey:
    """Revoke the tenant's key `key_id`. Refused (Conflict) when it is already revoked or the tenant's last
    active key: a tenant without a key could never call the API again, not even to make a new one."""
    # Lock the tenant row (PostgreSQL; SQLite serialises writers anyway) so two concurrent revocations of a
    # tenant's last two keys cannot both see the other key still active.
    session.scalars(select(Tenant).where(Tenant.id == tenant.id).with_for_update()).one()
    row = session.scalars(select(ApiKey).where(ApiKey.tenant_id == tenant.id, ApiKey.id == key_id)).one_or_none()
    if row is None:
        raise NotFound(f"API key {key_id} not found")
    if row.revoked_at is not None:
        raise Conflict(f"API key {key_id} is already revoked (at {row.revoked_at.isoformat()})")
    if active_key_count(session, tenant) <= 1:
        raise Conflict(f"API key {key_id} is this tenant's last active key; create another before revoking it")
    row.revoked_at = dt.datetime.now(dt.UTC)
    session.flush()
    return row


def active_key_count(session: Session, tenant: Tenant) -> int:
    stmt = select(func.count()).select_from(ApiKey).where(ApiKey.tenant_id == tenant.id, ApiKey.revoked_at.is_(None))
    return session.scalar(stmt) or 0


def tenant_for_key(session: Session, key: str) -> Tenant | None:
    """The tenant owning an unrevoked key, or None for an unknown or revoked one."""
    stmt = (
        select(Tenant)
        .join(ApiKey, ApiKey.tenant_id == Tenant.id)
        .where(ApiKey.key_hash == hash_key(key), ApiKey.revoked_at.is_(None))
    )
    return session.scalars(stmt).one_or_none()


def revoke_key(session: Session, tenant: Tenant, key: str) -> bool:
    row = session.scalars(
        select(ApiKey).where(ApiKey.tenant_id == tenant.id, ApiKey.key_hash == hash_key(key))
    ).one_or_none()
    if row is None or row.revoked_at is not None:
        return False
    row.revoked_at = dt.datetime.now(dt.UTC)
    return True


def tenant_count(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Tenant)) or 0


def ensure_bootstrap_tenant(session: Session, key: str | None) -> str | None:
    """On the first start (no tenant yet) create one and return its key; later starts return None, except that
    a bootstrap key never seen before is added to the first tenant, so setting it later still works."""
    if tenant_count(session) == 0:
        return create_tenant(session, "default", key)[1]
    known = key and session.scalars(select(ApiKey.id).where(ApiKey.key_hash == hash_key(key))).first()
    if key and not known:
        first = session.scalars(select(Tenant).order_by(Tenant.id).limit(1)).one()
        add_key(session, first, key)
    return None
