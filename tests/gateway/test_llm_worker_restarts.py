"""A language-model worker restarted under its old name (a pod's container restarted in place by the kubelet, a VM's
service by systemd's Restart=on-failure) is another process: the sequences its predecessor was generating end with
an error naming the death, billed for what was delivered, instead of waiting forever on a worker that heartbeats
under the same name and never heard of them. Which process took a sequence is said exactly (its registration's
started_at, carried by the Started event), never by comparing the gateway's clock with the worker's."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from functools import partial

import pytest

from luminal.gateway.openai_generation import worker_alive
from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.stream import Account, Delta, GenerationFailed
from luminal.scheduler.registry import MemoryRegistry, WorkerInfo
from luminal.scheduler.sequences.memory import MemorySequences
from luminal.scheduler.sequences.relay import RelayedStream
from luminal.scheduler.sequences.request import SequenceRequest

DEPLOYMENT = 12


def test_only_the_process_that_took_a_sequence_is_the_worker_that_took_it():
    registry = MemoryRegistry()
    first = time.time() - 5
    registry.register(WorkerInfo("pod-a", DEPLOYMENT, pid=10, host="node-1", started_at=first))
    assert worker_alive(registry, DEPLOYMENT, "pod-a", first)
    assert not worker_alive(registry, DEPLOYMENT + 1, "pod-a", first)  # another deployment's worker
    registry.register(WorkerInfo("pod-a", DEPLOYMENT, pid=11, host="node-1", started_at=first + 4))  # restarted
    assert not worker_alive(registry, DEPLOYMENT, "pod-a", first)
    assert worker_alive(registry, DEPLOYMENT, "pod-a", first + 4)  # what it takes from now on is its own
    assert worker_alive(registry, DEPLOYMENT, "pod-a", None)  # an older worker's Started: any process under the id


def taken(sequences: MemorySequences, worker_started_at: float | None) -> SequenceRequest:
    """A sequence submitted and taken by "pod-a", registered with `worker_started_at`."""
    account = Account(uuid.uuid4().hex, DEPLOYMENT, 3, "cpu", "tiny", 2)
    request = SequenceRequest(account, (5, 6, 7), SamplingParams(max_tokens=8))
    sequences.submit(request, max_waiting=8)
    sequences.take(DEPLOYMENT, "pod-a", 1, 1.0, worker_started_at)
    return request


async def read_after_a_slow_step(sequences: MemorySequences, relay: RelayedStream) -> list[str]:
    """The texts of a stream whose worker emits a token, then its last 0.3 s later, from its own thread: the relay,
    watching every 0.05 s, asks the registry about the worker several times in between."""
    request_id = relay.request.id
    sequences.emit([(request_id, Delta("a", 1, None))])
    slow = threading.Timer(0.3, sequences.emit, args=([(request_id, Delta("b", 2, "length"))],))
    slow.start()
    try:
        return [delta.text async for delta in relay]
    finally:
        slow.join()


def test_a_stream_of_a_worker_restarted_in_place_ends_with_its_death_not_a_hang():
    sequences, registry, billed = MemorySequences(), MemoryRegistry(), []
    started = time.time() - 5
    registry.register(WorkerInfo("pod-a", DEPLOYMENT, pid=10, host="node-1", started_at=started))
    request = taken(sequences, started)
    relay = RelayedStream(sequences, request, partial(worker_alive, registry, DEPLOYMENT), watch_s=0.05,
                          bill=billed.append)  # fmt: skip
    texts = []

    async def read():
        async for delta in relay:
            texts.append(delta.text)
            if len(texts) == 2:  # killed after two tokens; its container starts again under the pod's name
                registry.register(WorkerInfo("pod-a", DEPLOYMENT, pid=11, host="node-1", started_at=time.time()))

    sequences.emit([(request.id, Delta("a", 1, None)), (request.id, Delta("b", 2, None))])
    with pytest.raises(GenerationFailed, match="worker pod-a died while generating this sequence, after 2 tokens"):
        asyncio.run(asyncio.wait_for(read(), 10))
    assert texts == ["a", "b"]
    assert [(record.worker_id, record.completion_tokens) for record in billed] == [("pod-a", 2)]


@pytest.mark.parametrize("worker_clock_ahead_s", [3600.0, -3600.0])
def test_a_live_worker_whose_clock_differs_from_the_gateways_is_still_alive(worker_clock_ahead_s):
    """The worker's clock an hour ahead of the gateway's (or behind): it registered and took the sequence at once,
    then was silent past several watches between tokens; its stream goes on to the end."""
    sequences, registry = MemorySequences(), MemoryRegistry()
    started = time.time() + worker_clock_ahead_s  # its own clock's reading, as llm_worker registers it
    registry.register(WorkerInfo("pod-a", DEPLOYMENT, pid=10, host="node-1", started_at=started))
    request = taken(sequences, started)
    relay = RelayedStream(sequences, request, partial(worker_alive, registry, DEPLOYMENT), watch_s=0.05)
    assert asyncio.run(asyncio.wait_for(read_after_a_slow_step(sequences, relay), 10)) == ["a", "b"]
    assert relay.resubmissions == 0


def test_an_older_workers_stream_is_watched_by_its_id_alone():
    """A worker from before Started named its process (an upgrade's mixed fleet): its live stream goes on."""
    sequences, registry = MemorySequences(), MemoryRegistry()
    registry.register(WorkerInfo("pod-a", DEPLOYMENT, pid=10, host="node-1", started_at=time.time() + 3600))
    request = taken(sequences, None)
    relay = RelayedStream(sequences, request, partial(worker_alive, registry, DEPLOYMENT), watch_s=0.05)
    assert asyncio.run(asyncio.wait_for(read_after_a_slow_step(sequences, relay), 10)) == ["a", "b"]
