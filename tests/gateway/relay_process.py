"""A gateway's relaying side in a process of its own, for the tests that kill a gateway: it submits sequences to a
deployment on Redis and relays their events (RelayedStream), printing `<request id> <tokens so far>` per token.

    python -m tests.gateway.relay_process '<json: redis_url, namespace, deployment_id, tenant_id, gpu_type,
                                           prompts (token id lists), max_tokens, lease_s>'
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid

from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.stream import Account
from luminal.scheduler.sequences.redis_sequences import RedisSequences
from luminal.scheduler.sequences.relay import RelayedStream
from luminal.scheduler.sequences.request import SequenceRequest


async def relay(transport: RedisSequences, request: SequenceRequest) -> None:
    async for _ in (stream := RelayedStream(transport, request)):
        print(request.id, stream.completion_tokens, flush=True)


async def main(spec: dict) -> None:
    transport = RedisSequences(spec["redis_url"], spec["namespace"], reader_lease_s=spec["lease_s"])
    params = SamplingParams(max_tokens=spec["max_tokens"], temperature=0.0, ignore_eos=True)
    requests = []
    for prompt in spec["prompts"]:
        account = Account(uuid.uuid4().hex, spec["deployment_id"], spec["tenant_id"], spec["gpu_type"], "relayed", 1)
        requests.append(SequenceRequest(account, tuple(prompt), params))
        transport.submit(requests[-1], max_waiting=64)
        print(requests[-1].id, 0, flush=True)
    await asyncio.gather(*(relay(transport, r) for r in requests))


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
