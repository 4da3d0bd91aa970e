"""The gateway's blocking sequence-transport calls (a Redis round trip each) run off its event loop: a submit while
a request starts, a cancel when a client goes away. Each is checked with a transport whose call waits for a gate
that only the event loop opens: run on the loop, the call would wait out its patience and fail."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from luminal.gateway.generation_metrics import GenerationMetrics
from luminal.gateway.openai_generation import Served
from luminal.gateway.openai_schemas import SchedulingFields
from luminal.scheduler.generation.engines import Engines
from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.stream import Account
from luminal.scheduler.sequences.memory import MemorySequences
from luminal.scheduler.sequences.relay import RelayedStream
from luminal.scheduler.sequences.request import SequenceRequest

PATIENCE_S = 5.0


class GatedSequences(MemorySequences):
    """Its submit and cancel wait for `gate` (as a slow Redis would), recording the calls that got through."""

    def __init__(self):
        super().__init__()
        self.gate, self.through = threading.Event(), []

    def submit(self, request: SequenceRequest, max_waiting: int) -> None:
        assert self.gate.wait(PATIENCE_S), "submit ran on the event loop, which never opened the gate"
        super().submit(request, max_waiting)
        self.through.append("submit")

    def cancel(self, request_id: str) -> None:
        assert self.gate.wait(PATIENCE_S), "cancel ran on the event loop, which never opened the gate"
        super().cancel(request_id)
        self.through.append("cancel")


async def opened_by_the_loop(gate: threading.Event) -> None:
    await asyncio.sleep(0.05)  # runs only if the loop is free while the call waits
    gate.set()


def served(sequences) -> Served:
    deployment = {"id": 5, "gpu_type": "cpu", "version": 1, "max_waiting": 8}
    metrics = GenerationMetrics(CollectorRegistry(), Engines())
    ledger = SimpleNamespace(record=[].append)  # bills nothing here: no worker dies
    return Served(sequences, None, 64, 1, "tiny", deployment, metrics, 30.0, lambda d: None, None, ledger, False)


def test_a_submit_runs_off_the_event_loop():
    sequences = GatedSequences()

    async def start():
        opener = asyncio.create_task(opened_by_the_loop(sequences.gate))
        relayed, _ = await served(sequences).start([1, 2, 3], SamplingParams(max_tokens=4), SchedulingFields(), 0.0)
        await opener
        return relayed

    relayed = asyncio.run(asyncio.wait_for(start(), 2 * PATIENCE_S))
    assert sequences.through == ["submit"] and sequences.depth(5) == 1 and relayed.prompt_tokens == 3


def test_a_cancel_runs_off_the_event_loop():
    sequences = GatedSequences()
    sequences.gate.set()
    request = SequenceRequest(Account(uuid.uuid4().hex, 5, 1, "cpu"), (1, 2), SamplingParams(max_tokens=4))
    sequences.submit(request, 8)
    sequences.gate.clear()

    async def client_goes_away():
        RelayedStream(sequences, request).cancel()
        await opened_by_the_loop(sequences.gate)
        deadline = time.monotonic() + PATIENCE_S
        while "cancel" not in sequences.through:
            assert time.monotonic() < deadline, "the cancel never got through"
            await asyncio.sleep(0.01)

    asyncio.run(client_goes_away())
    assert sequences.depth(5) == 0
