"""A record of every TCP connect and DNS lookup this test process makes, so a webhook test can show that a refused
target was never contacted: no packet left for it, not even a lookup (`no_network` fixture)."""

from __future__ import annotations

import ipaddress
import socket

import pytest


class NetworkLog:
    def __init__(self):
        self.connects: list[object] = []  # socket addresses passed to connect/connect_ex
        self.lookups: list[str] = []  # names (not address literals) that getaddrinfo was asked for

    def connected_beyond(self, *allowed: tuple[str, int]) -> list[object]:
        """Connects to anything but the `allowed` (host, port) pairs, e.g. the test's own server."""
        return [a for a in self.connects if not (isinstance(a, tuple) and tuple(a[:2]) in allowed)]


def _is_literal(host: object) -> bool:
    try:
        ipaddress.ip_address(str(host))
        return True
    except ValueError:
        return False


@pytest.fixture
def no_network(monkeypatch) -> NetworkLog:
    """Records each connect (and still makes it: a test's client reaches its own server); a DNS lookup of a name
    fails at once, recorded, instead of asking a real resolver. Tests that need a name to resolve replace
    `webhook_targets.resolve`."""
    log = NetworkLog()
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def connect(sock, address):
        log.connects.append(address)
        return real_connect(sock, address)

    def connect_ex(sock, address):
        log.connects.append(address)
        return real_connect_ex(sock, address)

    def getaddrinfo(host, *args, **kwargs):
        if host is not None and not _is_literal(host.decode() if isinstance(host, bytes) else host):
            log.lookups.append(str(host))
            raise socket.gaierror(socket.EAI_NONAME, "no DNS in tests")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return log
