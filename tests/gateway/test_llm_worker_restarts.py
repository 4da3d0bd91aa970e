"""A language-model worker restarted under its old name (a pod's container restarted in place by the kubelet, a VM's
service by systemd's Restart=on-failure) is another process: the sequences its predecessor was generating end with
an error naming the death, billed for what was delivered, instead of waiting forever on a worker that heartbeats
under the same name and never heard of them."""

from __future__ import annotations

import asyncio
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


def test_a_worker_registered_after_it_took_a_sequence_is_not_the_one_that_took_it():
    registry = MemoryRegistry()
    registry.register(WorkerInfo("pod-a", DEPLOYMENT, pid=10, host="node-1", started_at=time.time() - 5))
    taken_at = time.time()
    assert worker_alive(registry, DEPLOYMENT, "pod-a", taken_at)
    assert not worker_alive(registry, DEPLOYMENT + 1, "pod-a", taken_at)  # another deployment's worker
    registry.register(WorkerInfo("pod-a", DEPLOYMENT, pid=11, host="node-1", started_at=taken_at + 1))  # restarted
    assert not worker_alive(registry, DEPLOYMENT, "pod-a", taken_at)
    assert worker_alive(registry, DEPLOYMENT, "pod-a", time.time() + 1)  # what it takes from now on is its own


def test_a_stream_of_a_worker_restarted_in_place_ends_with_its_death_not_a_hang():
    sequences, registry, billed = MemorySequences(), MemoryRegistry(), []
    registry.register(WorkerInfo("pod-a", DEPLOYMENT, pid=10, host="node-1", started_at=time.time() - 5))
    account = Account(uuid.uuid4().hex, DEPLOYMENT, 3, "cpu", "tiny", 2)
    request = SequenceRequest(account, (5, 6, 7), SamplingParams(max_tokens=8))
    sequences.submit(request, max_waiting=8)
    sequences.take(DEPLOYMENT, "pod-a", 1, 1.0)
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
