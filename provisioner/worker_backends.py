"""The worker backend `LUMINAL_WORKER_BACKEND` names, of those that run workers outside the serving process
("thread" workers share the gateway's queue and loaded programs, so the gateway builds those itself)."""

from __future__ import annotations

from luminal.provisioner.backends import WorkerBackend
from luminal.scheduler.registry import WorkerRegistry
from luminal.store.settings import Settings


def open_worker_backend(settings: Settings, registry: WorkerRegistry) -> WorkerBackend:
    name = settings.worker_backend
    if name == "process":
        from luminal.provisioner.local_processes import LocalProcessWorkers

        return LocalProcessWorkers(settings, registry)
    if name not in ("kubernetes", "ec2"):
        raise ValueError(f"unknown worker backend {name!r}: thread, process, kubernetes or ec2")
    # Workers on other machines reach the platform only through its shared services.
    if not settings.queue_url.startswith(("redis://", "rediss://")):
        raise ValueError(f"{name} workers need a queue they can reach: set LUMINAL_QUEUE_URL=redis://...")
    if settings.resolved_database_url.startswith("sqlite"):
        raise ValueError(
            f"{name} workers need a database they can reach: set LUMINAL_DATABASE_URL=postgresql+psycopg://..."
        )
    if name == "kubernetes":
        from luminal.provisioner.kubernetes_workers import KubernetesWorkers

        return KubernetesWorkers(settings, registry=registry)
    from luminal.provisioner.ec2_workers import Ec2Workers

    return Ec2Workers(settings, registry)
