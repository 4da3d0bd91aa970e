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

from luminal.gateway.store.tables import ApiKey, Tenant

KEY_PREFIX = "lm_"


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
    key = key or new_key()
    session.add(ApiKey(tenant_id=tenant.id, key_hash=hash_key(key)))
    session.flush()
    return key


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
