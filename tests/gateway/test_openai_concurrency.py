"""Many streams at once: 20 concurrent streams of different lengths (16 run, the rest wait for a row) each equal
their answer alone, and share decode steps; a client that disconnects mid-stream stops its sequence and frees
its cache blocks at once; a long prompt arriving beside running streams is prefilled a chunk between each of
their decode steps."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.gateway.openai_world import MAX_BATCH, start_world

WORDS = "the quick brown fox jumps over the lazy dog hello world luminal compiler language models answer".split()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    world, stop = start_world(tmp_path_factory.mktemp("openai-concurrency"))
    yield world
    stop()


async def _streamed(client, model: str, prompt: str, max_tokens: int) -> tuple[str, str]:
    stream = await client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                             stream=True, extra_body={"ignore_eos": True})  # fmt: skip
    parts, reason = [], None
    async for chunk in stream:
        parts.append(chunk.choices[0].text)
        reason = chunk.choices[0].finish_reason or reason
    return "".join(parts), reason


@pytest.mark.parametrize("model", ["tiny-llama", "tiny-gpt2"])
def test_concurrent_streams_equal_their_single_answers(world, model):
    jobs = [(" ".join(WORDS[k % 7 : k % 7 + 1 + k % 5]), 6 + 3 * (k % 8)) for k in range(MAX_BATCH + 4)]
    singles = []
    for prompt, n in jobs:
        answer = world.client().completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0,
                                                   extra_body={"ignore_eos": True})  # fmt: skip
        singles.append((answer.choices[0].text, "length"))
    engine = world.engine(model)
    steps, rows = engine.steps, engine.rows_stepped

    async def together():
        client = world.async_client()
        try:
            return await asyncio.gather(*(_streamed(client, model, p, n) for p, n in jobs))
        finally:
            await client.close()

    assert asyncio.run(together()) == singles
    assert (engine.rows_stepped - rows) / (engine.steps - steps) > 4  # decode steps were shared
    assert engine.batch.rows == 0 and not engine.waiting and engine.batch.pool.in_use == 0


def test_disconnect_stops_the_sequence_and_frees_its_blocks(world):
    engine = world.engine("tiny-llama")
    step = engine.model.step
    original = step.run

    def slow_run(feed):  # slow decode steps, so the disconnect lands long before max_tokens
        time.sleep(0.02)
        return original(feed)

    step.run = slow_run
    try:
        before = engine.steps
        stream = world.client().completions.create(
            model="tiny-llama", prompt="the quick", max_tokens=80, temperature=0, stream=True,
            extra_body={"ignore_eos": True},
        )  # fmt: skip
        chunks = iter(stream)
        next(chunks), next(chunks)
        stream.close()
        deadline = time.monotonic() + 5
        while engine.running and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not engine.running and engine.batch.rows == 0 and engine.batch.positions == 0
        assert engine.batch.pool.in_use == 0 and not engine.batch.pool.tables
        assert engine.steps - before < 40  # it stopped well before its 80 tokens
    finally:
        step.run = original


def test_a_long_prompt_is_prefilled_in_chunks_between_running_streams_steps(world):
    engine = world.engine("tiny-llama")
    # Long enough that the first short still runs through the long prompt's chunks even when the second one's
    # request reaches the engine dozens of steps later (a loaded machine).
    shorts = [("the quick", 90), ("hello world", 90)]
    long = (" ".join(WORDS), 8)
    assert len(world.tokenizer(long[0])["input_ids"]) > 3 * 8

    def single(prompt: str, n: int) -> tuple[str, str]:
        answer = world.client().completions.create(model="tiny-llama", prompt=prompt, max_tokens=n, temperature=0,
                                                   extra_body={"ignore_eos": True})  # fmt: skip
        return answer.choices[0].text, "length"

    # The long prompt's own answer comes after: before, its blocks would stay cached and it would not be prefilled.
    singles = [single(p, n) for p, n in shorts]
    deadline = time.monotonic() + 10  # a single's answer can reach us before its row leaves the engine's rows
    while engine.busy and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not engine.busy  # so the two rows counted below are the two short streams
    chunk, step, rounds = engine.model.chunk, engine.model.step, engine.chunked.tokens_per_round
    events = []  # ("chunk", first position) or ("step", rows), in the order the engine ran them

    def chunk_run(feed, original=chunk.run):
        events.append(("chunk", int(feed["position_ids"][0, 0])))
        return original(feed)

    def step_run(feed, original=step.run):
        events.append(("step", len(feed["input_ids"])))
        return original(feed)

    chunk.run, step.run, engine.chunked.tokens_per_round = chunk_run, step_run, 8
    try:

        async def together():
            client = world.async_client()
            try:
                running = [asyncio.create_task(_streamed(client, "tiny-llama", p, n)) for p, n in shorts]
                while len(engine.running) < len(shorts):  # the long prompt arrives while they decode
                    await asyncio.sleep(0.005)
                return [*await asyncio.gather(*running, _streamed(client, "tiny-llama", *long))]
            finally:
                await client.close()

        together_answers = asyncio.run(together())
    finally:
        del chunk.run, step.run
        engine.chunked.tokens_per_round = rounds
    assert together_answers == [*singles, single(*long)]
    continued = [k for k, (kind, start) in enumerate(events) if kind == "chunk" and start > 0]
    assert len(continued) >= 3  # the long prompt took several chunks
    assert all(events[k - 1] == ("step", 2) for k in continued), events  # each after a step of both streams
