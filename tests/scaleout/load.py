"""Load spread over several gateways, as a load balancer in front of them spreads it: request i goes to gateway
i mod n. A gateway that refuses the connection (dead: the request was never sent) hands the request to the next
one, which is safe; a connection that breaks after the request was sent is recorded as cut off and not resent,
since the request may have been executed (at most once, as a proxy treats a POST). Every answer is checked
against the reference interpreter (request i sends input row i)."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx
import numpy as np

from tests.billing_reconciliation import FEATURES, inputs, reference

CUT_OFF = -1  # the connection broke after the request was sent: no answer, maybe executed
UNREACHABLE = -2  # every gateway refused the connection: never sent
RETRYABLE = {429, 503, 504}  # refusals a client may retry (after Retry-After)


@dataclass(frozen=True)
class Outcome:
    status: int  # the HTTP status, or CUT_OFF
    gateway: str  # the gateway that answered (or cut it off)
    request_id: str | None = None  # Luminal-Request-Id of a 200
    right: bool | None = None  # a 200's output equals the reference's
    retry_after: str | None = None
    error: str | None = None  # the OIP error body's message of a refusal, or the transport error
    ended_at: float = field(default_factory=time.monotonic)  # when the client saw the outcome


class Load:
    """`concurrency` threads sending requests for `model` until `stop()` or `max_requests`."""

    def __init__(self, gateways: dict[str, str], key: str, model: str, concurrency: int, max_requests: int = 50_000):
        self.names = list(gateways)
        self.clients = {
            name: httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120,
                               limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency))
            for name, url in gateways.items()
        }  # fmt: skip
        self.model, self.max_requests = model, max_requests
        self.rows = inputs(max_requests)
        self.expected = reference(self.rows)
        self.outcomes: dict[int, Outcome] = {}
        self.rerouted = 0  # requests a dead gateway refused, sent to the next one
        self._next = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(concurrency)]

    def start(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def stop(self, timeout: float = 300) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
        assert not any(t.is_alive() for t in self._threads), "the load did not finish"
        for client in self.clients.values():
            client.close()

    def finish(self, timeout: float = 600) -> None:
        """Waits for all `max_requests` requests to be sent and answered, then closes the connections."""
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self.stop()

    def answered(self, gateway: str | None = None) -> int:
        with self._lock:
            return sum(o.status == 200 and gateway in (None, o.gateway) for o in self.outcomes.values())

    def statuses(self) -> Counter:
        with self._lock:
            return Counter(o.status for o in self.outcomes.values())

    def _run(self) -> None:
        while not self._stop.is_set():
            i = next(self._next)
            if i >= self.max_requests:
                return
            outcome = self._send(i)
            with self._lock:
                self.outcomes[i] = outcome

    def _send(self, i: int) -> Outcome:
        body = {"inputs": [{"name": "x", "shape": [1, FEATURES], "datatype": "FP32", "data": self.rows[i].tolist()}]}
        order = self.names[i % len(self.names) :] + self.names[: i % len(self.names)]
        error = ""
        for name in order:
            try:
                response = self.clients[name].post(f"/v2/models/{self.model}/infer", json=body)
            except httpx.ConnectError as e:  # nothing was sent: the next gateway may take it
                error = repr(e)
                with self._lock:
                    self.rerouted += 1
                continue
            except httpx.TransportError as e:
                return Outcome(CUT_OFF, name, error=repr(e))
            if response.status_code == 200:
                got = np.asarray(response.json()["outputs"][0]["data"], np.float32)
                right = bool(np.allclose(got, self.expected[i], rtol=1e-5, atol=1e-6))
                return Outcome(200, name, response.headers["Luminal-Request-Id"], right)
            try:
                message = response.json()["error"]
            except (ValueError, KeyError, TypeError):
                message = None  # not the OIP error shape: the test reports it
            return Outcome(response.status_code, name, retry_after=response.headers.get("Retry-After"), error=message)
        return Outcome(UNREACHABLE, "none", error=error)
