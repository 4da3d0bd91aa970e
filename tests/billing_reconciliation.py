"""Load with distinct inputs, and the reconciliation of its answers with the bill, for the tests that kill parts
of a running platform: every answer checked against the reference interpreter, every 200 answer's request id
(the `Luminal-Request-Id` header) found billed exactly once in the ledger."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
import numpy as np
from sqlalchemy import func, select

import luminal as lm
from luminal.store.database import Database
from luminal.store.tables import BilledRequest, UsageRecordRow
from tests.gateway.conftest import BOOTSTRAP_KEY, tiny_graph

FEATURES = 4
REFERENCE_ROWS = 64  # the tiny graph's batch dimension goes up to 64


def inputs(count: int, offset: int = 0) -> np.ndarray:
    """`count` distinct rows: request i sends row i, so each answer can be checked on its own."""
    i = np.arange(offset, offset + count, dtype=np.float32)[:, None]
    return np.concatenate([i / 1000, -i / 997, np.sin(i), np.ones_like(i)], axis=1).astype(np.float32)


def reference(rows: np.ndarray) -> np.ndarray:
    graph = tiny_graph(FEATURES)
    chunks = [rows[i : i + REFERENCE_ROWS] for i in range(0, len(rows), REFERENCE_ROWS)]
    return np.concatenate([lm.run(graph, {"x": chunk})["probs"] for chunk in chunks])


@dataclass
class Answers:
    """What the client saw: per request, its HTTP status (None: not sent yet; -1: the connection failed, no
    answer) and, for a 200, its request id and whether its output was right."""

    status: list[int | None]
    request_ids: dict[int, str] = field(default_factory=dict)
    wrong: list[int] = field(default_factory=list)
    failures: dict[int, str] = field(default_factory=dict)  # request -> the transport error that ended it
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def ok(self) -> int:
        return sum(s == 200 for s in self.status)

    @property
    def done(self) -> int:
        return sum(s is not None for s in self.status)


def send(url: str, rows: np.ndarray, answers: Answers, offset: int, concurrency: int, timeout: float) -> None:
    """POSTs each row as its own request, `concurrency` at a time, recording into `answers` from `offset`."""
    expected = reference(rows)
    # Idle connections are dropped after 1 s: httpx keeps them 5 s by default, as long as uvicorn's keep-alive, so a
    # request could go out on a connection the server was closing at that moment (a transport error, not an answer).
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency, keepalive_expiry=1.0)
    headers = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}
    with httpx.Client(base_url=url, headers=headers, timeout=timeout, limits=limits) as client:

        def one(i: int) -> None:
            body = {"inputs": [{"name": "x", "shape": [1, FEATURES], "datatype": "FP32", "data": rows[i].tolist()}]}
            try:
                response = client.post("/v2/models/tiny/infer", json=body)
            except httpx.TransportError as error:  # the server was killed with this request in flight
                status = -1
                with answers.lock:
                    answers.failures[offset + i] = repr(error)
            else:
                status = response.status_code
            with answers.lock:
                answers.status[offset + i] = status
                if status == 200:
                    answers.request_ids[offset + i] = response.headers["Luminal-Request-Id"]
                    got = np.asarray(response.json()["outputs"][0]["data"], np.float32)
                    if not np.allclose(got, expected[i], rtol=1e-5, atol=1e-6):
                        answers.wrong.append(offset + i)

        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(one, range(len(rows))))


@dataclass(frozen=True)
class Bill:
    request_ids: list[str]  # every request id of every usage record, repeats included
    billed_rows: int  # rows of billed_requests
    records: int
    batch_size_sum: int

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in Counter(self.request_ids).values() if n > 1)


def read_bill(database_url: str) -> Bill:
    db = Database(database_url)
    try:
        with db.session() as s:
            lists = s.scalars(select(UsageRecordRow.request_ids)).all()
            billed_rows = s.scalar(select(func.count()).select_from(BilledRequest))
            batch_size_sum = s.scalar(select(func.coalesce(func.sum(UsageRecordRow.batch_size), 0)))
    finally:
        db.dispose()
    return Bill([rid for ids in lists for rid in ids], billed_rows, len(lists), int(batch_size_sum))
