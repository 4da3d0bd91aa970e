"""A client gone before it read a token, on Redis with the engine in a worker process: its sequence is cancelled on
the worker (its slot freed, nothing left in flight) and billed only for the tokens the worker generated.

Through a real HTTP client (a streamed chat completion, the connection closed once the sequence is queued, no byte
of the answer read), and through the app with a client already gone when the response would begin, streamed or
not: Starlette then never starts a streamed body, which is the case the body's own cleanup cannot cover."""

from __future__ import annotations

import asyncio
import http.client
import json
import time

import pytest

from luminal.scheduler.generation.stream import Delta, Failed
from luminal.scheduler.sequences.codec import decode_event
from tests.gateway.conftest import BOOTSTRAP_KEY
from tests.gateway.llm_process_world import POSITIONS, World, serving
from tests.gateway.test_llm_routing_api import wait_for
from tests.gateway.test_llm_worker_processes import billed_records
from tests.scheduler.queue_fixtures import fresh_namespace

MAX_TOKENS = POSITIONS - 72  # a sequence long enough that one left running would be seen to
CHAT = "/openai/v1/chat/completions"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("llm-disconnects")
    with fresh_namespace() as namespace, serving(tmp, namespace) as world:
        yield world


def chat_body(stream: bool) -> bytes:
    messages = [{"role": "user", "content": "the quick brown fox"}]
    body = {"model": "tiny-llama", "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True, "stream": stream}  # fmt: skip
    return json.dumps(body).encode()


def assert_cancelled_and_billed_for_what_ran(world: World, streams_before: set[bytes]) -> None:
    """Nothing of the deployment waits or runs within a short bound; each sequence a worker took ended cancelled,
    with fewer deltas than asked for, and its usage (if any) counts exactly those."""
    d, gone_at = world.deployment["id"], time.time()
    wait_for(lambda: not world.queued(), "the sequence is no longer queued or in flight", 10)

    def freed() -> bool:  # a report made after the client went away: the engine holds nothing
        loads = world.sequences.loads(d).values()
        return bool(loads) and all(w.reported_at > gone_at and w.running == w.waiting == 0 for w in loads)

    wait_for(freed, "the worker reports its slot freed", 10)
    assert world.app.state.platform.usage_drainer.flush(timeout=30), "the usage records were not drained"
    billed = {rid: tokens for rid, _, _, tokens in billed_records(world.settings)}
    for key in world.streams() - streams_before:
        events = [decode_event(fields[b"e"]) for _, fields in world.redis.xrange(key)]
        generated = sum(isinstance(e, Delta) for e in events)
        assert isinstance(events[-1], Failed) and "cancelled" in events[-1].message, events[-1]
        assert generated < MAX_TOKENS  # cut short, not run to its end unread
        request_id = key.decode().rsplit(":", 1)[1]
        assert billed.get(request_id, 0) == generated


def test_a_streamed_chat_whose_client_closes_before_reading_is_cancelled_on_the_worker(world):
    before = world.streams()
    connection = http.client.HTTPConnection("127.0.0.1", world.port, timeout=30)
    headers = {"Authorization": f"Bearer {BOOTSTRAP_KEY}", "Content-Type": "application/json"}
    connection.request("POST", CHAT, chat_body(stream=True), headers)
    wait_for(world.queued, "the sequence is queued")  # the body was read: a sequence exists
    connection.close()  # not a byte of the answer read
    assert_cancelled_and_billed_for_what_ran(world, before)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_client_gone_before_the_response_begins_cancels_its_sequence(world, stream):
    """The client's body arrives, then every later receive says it disconnected (as uvicorn's does for a client
    that closed while the request was being admitted)."""
    before, body, sent = world.streams(), chat_body(stream), []
    delivered = False

    async def receive() -> dict:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)
        await asyncio.sleep(0)  # as a socket whose writes are paused: the response's cancellation lands here

    headers = [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {BOOTSTRAP_KEY}".encode()),
               (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]  # fmt: skip
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": CHAT, "raw_path": CHAT.encode(), "query_string": b"",
             "root_path": "", "headers": headers, "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80),
             "state": {}}  # fmt: skip
    # On the gateway's own event loop, where the platform's asynchronous clients live.
    asyncio.run_coroutine_threadsafe(world.app(scope, receive, send), world.server._loop).result(60)
    assert_cancelled_and_billed_for_what_ran(world, before)
    if not stream:  # its answer (nobody reads it) says why it ended
        assert sent[0]["status"] == 499
