"""kmock's Kubernetes emulator on a real HTTP port, in a thread of its own (it is asyncio; the official client
and the backend are synchronous), and the official client pointed at it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# Every object sent is validated against this Kubernetes version's schemas (a version clusters run today).
KUBERNETES_VERSION = "1.33.0"


@dataclass
class Emulator:
    emulator: Any  # kmock.KubernetesEmulator: its `requests` are what the backend sent
    url: str

    def client(self) -> Any:
        from kubernetes import client

        config = client.Configuration()
        config.host = self.url
        return client.ApiClient(config)

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig naming the emulator, as an operator's names their cluster (written to `path`)."""
        path.write_text(
            f"""apiVersion: v1
kind: Config
clusters: [{{name: emu, cluster: {{server: "{self.url}"}}}}]
users: [{{name: me, user: {{token: not-a-secret}}}}]
contexts: [{{name: emu, context: {{cluster: emu, user: me}}}}]
current-context: emu
"""
        )
        return path


@contextmanager
def running_emulator() -> Iterator[Emulator]:
    kmock = pytest.importorskip("kmock")
    from kmock._internal.apps import Server  # the TCP server kmock's own pytest fixture starts

    started, box = threading.Event(), {}

    async def serve() -> None:
        async with kmock.KubernetesEmulator() as emulator, Server(emulator) as server:
            box["emulator"], box["url"] = emulator, str(server.url).rstrip("/")
            box["loop"], box["stop"] = asyncio.get_running_loop(), asyncio.Event()
            started.set()
            await box["stop"].wait()

    thread = threading.Thread(target=lambda: asyncio.run(serve()), name="kmock", daemon=True)
    thread.start()
    if not started.wait(30):
        raise RuntimeError("the Kubernetes emulator did not start")
    try:
        yield Emulator(box["emulator"], box["url"])
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(10)


def validate(document: dict) -> None:
    """Raises kubernetes_validate.ValidationError naming the first field the schema refuses (strict: unknown
    fields too)."""
    import kubernetes_validate

    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
