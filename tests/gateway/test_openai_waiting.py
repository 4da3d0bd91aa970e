"""Waiting for a place in the batch through the official `openai` client: `priority` and `queue_timeout` in
extra_body reach the waiting lines (the deployment's, for a worker, and the worker's engine's), the timeout capped
by the platform's request_timeout_s, which is also the wait allowed without one, counted from the request's
arrival; a sequence whose deadline passes while it waits is answered 504 in OpenAI's shape, or an error event once
its stream started, and never runs; a full line is a 429 with Retry-After."""

from __future__ import annotations

import itertools
import re
import time

import httpx
import openai
import pytest

from tests.gateway.conftest import BOOTSTRAP_KEY
from tests.gateway.openai_world import start_world

MODEL = "tiny-llama"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    world, stop = start_world(tmp_path_factory.mktemp("openai-waiting"))
    yield world
    stop()


@pytest.fixture
def engine(world):
    engine = world.engine(MODEL)
    clock, bound = engine.waiting.clock, engine.waiting.max_waiting
    yield engine
    engine.waiting.clock, engine.waiting.max_waiting = clock, bound


def _complete(world, **extra):
    return world.client().completions.create(
        model=MODEL, prompt="the quick", max_tokens=4, temperature=0, extra_body={"ignore_eos": True, **extra}
    )


def test_priority_and_timeout_reach_the_waiting_line(world, engine):
    counted = _prompt_tokens_counted(world)
    limit = world.app.state.platform.settings.request_timeout_s
    submitted = []
    original = engine.submit

    def recording(prompt, params, loop, account=None, priority=None, timeout_s=None, waited_s=0.0):
        submitted.append((priority, timeout_s))
        return original(prompt, params, loop, account, priority, timeout_s, waited_s)

    engine.submit = recording
    try:
        answers = [
            _complete(world).choices[0].text,
            _complete(world, priority=1, queue_timeout=2.5).choices[0].text,
            _complete(world, priority=10, queue_timeout=limit * 1000).choices[0].text,
        ]
    finally:
        del engine.submit
    assert submitted == [(5, limit), (1, 2.5), (10, limit)]
    assert len(set(answers)) == 1  # the same greedy text at any priority
    assert _prompt_tokens_counted(world) > counted  # the counter this file's expiry tests read does count


@pytest.mark.parametrize(
    "extra, param, words",
    [({"priority": 11}, "priority", "1 (most urgent) to 10"), ({"queue_timeout": 0}, "queue_timeout", "greater")],
)
def test_bad_priority_or_timeout_is_a_400_naming_it(world, extra, param, words):
    with pytest.raises(openai.BadRequestError) as caught:
        _complete(world, **extra)
    assert caught.value.body["param"] == param and words in caught.value.body["message"]


def _jumping_clock():
    """Each reading 1000 s after the last: a sequence's deadline has passed when the engine next looks."""
    return itertools.count(0.0, 1000.0).__next__


def _prompt_tokens_counted(world) -> float:
    registry = world.app.state.platform.metrics.registry
    samples = [s for m in registry.collect() if m.name == "luminal_prompt_tokens" for s in m.samples]
    return sum(s.value for s in samples if s.name.endswith("_total") and s.labels["model"] == MODEL)


def test_an_expired_sequence_is_a_504_and_never_runs(world, engine):
    engine.waiting.clock = _jumping_clock()
    prefills, prompt_tokens = engine.prompt_runs, _prompt_tokens_counted(world)
    with pytest.raises(openai.InternalServerError) as caught:
        _complete(world, queue_timeout=5)
    error = caught.value
    assert error.status_code == 504 and error.body["code"] == "timeout"
    assert "timeout passed before generation started" in error.body["message"]
    newest = _newest_failure(world)  # the dashboard lists it
    assert (newest["model"], newest["status"], newest["reason"]) == (MODEL, 504, "expired")
    assert engine.prompt_runs == prefills and not engine.waiting
    assert _prompt_tokens_counted(world) == prompt_tokens  # its prompt was never read


def test_the_waiting_deadline_counts_from_the_requests_arrival(world, engine, monkeypatch):
    """Time spent before the engine sees the request (here a slow tokenizer lookup, as a first read is) counts
    against queue_timeout: the sequence expires though a worker could take it at once."""
    texts = world.app.state.platform.language_models
    lookup = texts.get

    def slow_lookup(*args):
        time.sleep(0.5)
        return lookup(*args)

    monkeypatch.setattr(texts, "get", slow_lookup)
    prefills = engine.prompt_runs
    with pytest.raises(openai.InternalServerError) as caught:
        _complete(world, queue_timeout=0.3)
    assert caught.value.status_code == 504 and caught.value.body["code"] == "timeout"
    waited = float(re.search(r"it waited ([0-9.]+) s", caught.value.body["message"]).group(1))
    assert waited >= 0.5 and engine.prompt_runs == prefills
    assert _complete(world, queue_timeout=5).choices[0].finish_reason == "length"  # within its time: it runs


def test_an_expired_stream_ends_with_an_error_event(world, engine):
    engine.waiting.clock = _jumping_clock()
    prefills = engine.prompt_runs
    stream = world.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True
    )
    chunks = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in stream:  # the assistant's role was sent before the sequence could join
            chunks.append(chunk)
    assert [c.choices[0].delta.role for c in chunks] == ["assistant"]
    assert caught.value.body["code"] == "timeout" and "timeout passed" in caught.value.body["message"]
    assert engine.prompt_runs == prefills


def test_a_full_waiting_line_is_a_429_with_retry_after(world, monkeypatch):
    """The deployment's line for a worker (the sequence transport's) is the one that is full."""
    sequences = world.app.state.platform.sequences
    submit = sequences.submit
    monkeypatch.setattr(sequences, "submit", lambda request, max_waiting: submit(request, 0))
    with pytest.raises(openai.RateLimitError) as caught:
        _complete(world)
    error = caught.value
    assert error.status_code == 429 and error.body["type"] == "rate_limit_error"
    assert "already waiting for this model" in error.body["message"]
    assert int(error.response.headers["retry-after"]) >= 1
    newest = _newest_failure(world)
    assert (newest["model"], newest["status"], newest["reason"]) == (MODEL, 429, "rejected")
    assert newest["message"] == error.body["message"]


def _newest_failure(world) -> dict:
    headers = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}
    summary = httpx.get(f"{world.url}/v1/dashboard/summary", headers=headers, timeout=30).json()
    return summary["failures"][0]


def test_the_deployments_generation_settings_make_its_engine(world):
    """prefill_chunk and max_waiting given at deploy time (the world deploys GPT-2 with 24 and 200) reach the
    engine; a deployment without them gets the defaults."""
    with httpx.Client(base_url=world.url, headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"}) as http:
        shown = {d["model"]: (d["prefill_chunk"], d["max_waiting"]) for d in http.get("/v1/deployments").json()}
    assert shown == {"tiny-llama": (256, 256), "tiny-gpt2": (24, 200)}
    _complete(world)  # starts the llama engine if no test did
    world.client().completions.create(model="tiny-gpt2", prompt="the quick", max_tokens=2)
    llama, gpt2 = world.engine(MODEL), world.engine("tiny-gpt2")
    assert (gpt2.chunked.tokens_per_round, gpt2.waiting.max_waiting) == (24, 200)
    assert (llama.chunked.tokens_per_round, llama.waiting.max_waiting) == (256, 256)
