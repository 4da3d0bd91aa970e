"""The OpenAI-compatible API through the official `openai` client against a running gateway: greedy completions
and chat completions equal transformers' generate() token for token, streamed and not; max_tokens, stop strings
and EOS end text as OpenAI documents; seeded sampling repeats; errors come in OpenAI's shape."""

from __future__ import annotations

import httpx
import openai
import pytest
import torch

from tests.gateway.conftest import BOOTSTRAP_KEY
from tests.gateway.openai_world import POSITIONS, start_world
from tests.gateway.tenancy import ADMIN_TOKEN
from tests.llm_folders import EOS

PROMPTS = ["the quick brown", "hello world, hello luminal; a compiler of few", "user: what"]
MODELS = ["tiny-llama", "tiny-gpt2"]
CHAT = [{"role": "user", "content": "what is the capital?"}]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    world, stop = start_world(tmp_path_factory.mktemp("openai"))
    yield world
    stop()


def _text(world, ids: list[int]) -> str:
    return world.tokenizer.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_completion_equals_generate(world, model, prompt):
    ids = world.tokenizer(prompt)["input_ids"]
    want = world.generate(model, ids, 12)
    got = world.client().completions.create(
        model=model, prompt=prompt, max_tokens=12, temperature=0, extra_body={"ignore_eos": True}
    )
    assert got.choices[0].text == _text(world, want)
    assert got.choices[0].finish_reason == "length"
    assert (got.usage.prompt_tokens, got.usage.completion_tokens, got.usage.total_tokens) == (
        len(ids),
        12,
        len(ids) + 12,
    )


@pytest.mark.parametrize("model", MODELS)
def test_streamed_completion_equals_the_whole_one(world, model):
    client = world.client()
    kwargs = dict(model=model, prompt=PROMPTS[1], max_tokens=15, temperature=0, extra_body={"ignore_eos": True})
    whole = client.completions.create(**kwargs)
    chunks = list(client.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 15
    assert all(c.usage is None for c in chunks[:-1])


def test_prompt_as_token_ids(world):
    ids = world.tokenizer(PROMPTS[0])["input_ids"]
    got = world.client().completions.create(model="tiny-llama", prompt=ids, max_tokens=5, temperature=0,
                                            extra_body={"ignore_eos": True})  # fmt: skip
    assert got.choices[0].text == _text(world, world.generate("tiny-llama", ids, 5))


@pytest.mark.parametrize("model", MODELS)
def test_chat_completion_renders_the_template_as_transformers(world, model):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "what is the capital?"}]
    ids = world.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    want = world.generate(model, list(ids), 10)
    client = world.client()
    got = client.chat.completions.create(model=model, messages=messages, max_tokens=10, temperature=0,
                                         extra_body={"ignore_eos": True})  # fmt: skip
    assert got.choices[0].message.role == "assistant"
    assert got.choices[0].message.content == _text(world, want)
    assert got.usage.prompt_tokens == len(ids)
    stream = client.chat.completions.create(model=model, messages=messages, max_tokens=10, temperature=0,
                                            stream=True, extra_body={"ignore_eos": True})  # fmt: skip
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == got.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"


def test_stop_string_ends_the_text_before_it(world):
    client = world.client()
    full = client.completions.create(model="tiny-llama", prompt=PROMPTS[0], max_tokens=20, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text  # fmt: skip
    stop = full[5:8]
    assert stop and full.index(stop) >= 0
    for stream in (False, True):
        answer = client.completions.create(model="tiny-llama", prompt=PROMPTS[0], max_tokens=20, temperature=0,
                                           stop=[stop], stream=stream, extra_body={"ignore_eos": True})  # fmt: skip
        choices = [c.choices[0] for c in answer] if stream else answer.choices
        assert "".join(c.text for c in choices) == full[: full.index(stop)]
        assert choices[-1].finish_reason == "stop"


def test_end_of_sequence_stops_with_reason_stop(world):
    """A stop token id ends the sequence like EOS; with the model's EOS the answer equals generate()'s."""
    client = world.client()
    ids = world.tokenizer(PROMPTS[2])["input_ids"]
    tokens = world.generate("tiny-gpt2", ids, 10)
    got = client.completions.create(model="tiny-gpt2", prompt=PROMPTS[2], max_tokens=10, temperature=0,
                                    extra_body={"stop_token_ids": [tokens[3]], "ignore_eos": True})  # fmt: skip
    first = tokens.index(tokens[3])
    assert got.choices[0].finish_reason == "stop" and got.usage.completion_tokens == first + 1
    assert got.choices[0].text == _text(world, tokens[:first])
    with_eos = world.generate("tiny-gpt2", ids, 40, eos=True)
    got = client.completions.create(model="tiny-gpt2", prompt=PROMPTS[2], max_tokens=40, temperature=0)
    assert got.choices[0].text == _text(world, with_eos)
    assert got.choices[0].finish_reason == ("stop" if with_eos[-1] == 1 else "length")


def test_seeded_sampling_repeats(world):
    client = world.client()
    kwargs = dict(model="tiny-llama", prompt=PROMPTS[1], max_tokens=12, temperature=1.5, top_p=0.95,
                  extra_body={"top_k": 50, "ignore_eos": True})  # fmt: skip
    first, again = (client.completions.create(**kwargs, seed=11).choices[0].text for _ in range(2))
    others = {client.completions.create(**kwargs, seed=s).choices[0].text for s in range(12, 16)}
    assert first == again
    assert others - {first}  # other seeds draw other text


def test_models_lists_the_language_models(world):
    assert sorted(m.id for m in world.client().models.list()) == sorted(MODELS)


@pytest.mark.parametrize(
    "call, error, param",
    [
        (lambda c: c.completions.create(model="nope", prompt="a"), openai.NotFoundError, "model"),
        (lambda c: c.completions.create(model="tiny-llama", prompt="a", temperature=3), openai.BadRequestError,
         "temperature"),
        (lambda c: c.completions.create(model="tiny-llama", prompt="a", n=2), openai.BadRequestError, "n"),
        (lambda c: c.completions.create(model="tiny-llama", prompt="a", max_tokens=POSITIONS), openai.BadRequestError,
         None),
        (lambda c: c.completions.create(model="tiny-llama", prompt=[99999]), openai.BadRequestError, "prompt"),
        (lambda c: c.chat.completions.create(model="tiny-llama", messages=[]), openai.BadRequestError, "messages"),
        (lambda c: c.completions.create(model="tiny-llama", prompt="a", logprobs=6), openai.BadRequestError,
         "logprobs"),
        (lambda c: c.chat.completions.create(model="tiny-llama", messages=CHAT, logprobs=True, top_logprobs=21),
         openai.BadRequestError, "top_logprobs"),
        (lambda c: c.chat.completions.create(model="tiny-llama", messages=CHAT, top_logprobs=2),
         openai.BadRequestError, None),
    ],
)  # fmt: skip
def test_errors_come_in_openai_shape(world, call, error, param):
    with pytest.raises(error) as caught:
        call(world.client())
    body = caught.value.body
    assert set(body) == {"message", "type", "param", "code"} and body["message"]
    if param is not None:
        assert body["param"] == param


def test_missing_or_wrong_key_is_401(world):
    with pytest.raises(openai.AuthenticationError) as caught:
        world.client(key="lm_wrong").models.list()
    assert caught.value.body["type"] == "authentication_error"


def test_another_tenant_cannot_see_or_call_the_models(world):
    admin = httpx.post(f"{world.url}/v1/admin/tenants", json={"name": "other"},
                       headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})  # fmt: skip
    assert admin.status_code == 201, admin.text
    other = world.client(key=admin.json()["key"])
    assert list(other.models.list()) == []
    worded = set()
    for model in [*MODELS, "nope"]:
        with pytest.raises(openai.NotFoundError) as caught:
            other.completions.create(model=model, prompt="a", max_tokens=2)
        with pytest.raises(openai.NotFoundError) as chat:
            other.chat.completions.create(model=model, messages=[{"role": "user", "content": "a"}], max_tokens=2)
        worded |= {e.value.body["message"].replace(model, "<m>") for e in (caught, chat)}
    assert len(worded) == 1  # worded as for a model that does not exist, so nothing can be probed


def test_eos_token_text_never_appears(world):
    got = world.client().completions.create(model="tiny-llama", prompt=PROMPTS[0], max_tokens=30, temperature=0)
    assert EOS not in got.choices[0].text


def test_oip_infer_on_a_language_model_is_refused(world):
    body = {"inputs": [{"name": "input_ids", "shape": [1, 2], "datatype": "INT64", "data": [1, 2]}]}
    answer = httpx.post(f"{world.url}/v2/models/tiny-llama/infer", json=body,
                        headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"})  # fmt: skip
    assert answer.status_code == 400 and "language model" in answer.json()["error"]


def test_sequences_are_billed_with_their_tokens(world):
    answer = world.client().completions.create(model="tiny-gpt2", prompt=PROMPTS[1], max_tokens=7, temperature=0,
                                               extra_body={"ignore_eos": True})  # fmt: skip
    http = httpx.Client(base_url=world.url, headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"})
    report = http.get("/v1/usage").json()  # waits for the usage written so far
    records = http.get("/v1/usage/records", params={"limit": 1000}).json()
    mine = [r for r in records if f"cmpl-{r['batch_id']}" == answer.id]
    assert len(mine) == 1
    record = mine[0]
    assert (record["prompt_tokens"], record["completion_tokens"]) == (answer.usage.prompt_tokens, 7)
    assert record["model"] == "tiny-gpt2" and record["request_ids"] == [record["batch_id"]]
    assert 0 < record["seconds"] <= record["ended_at"] - record["started_at"]
    assert report["totals"]["completion_tokens"] >= 7 and report["totals"]["prompt_tokens"] >= len(mine)


def test_metrics_show_token_latencies_and_counts(world):
    world.client().completions.create(model="tiny-llama", prompt=PROMPTS[0], max_tokens=6, temperature=0,
                                      extra_body={"ignore_eos": True})  # fmt: skip
    text = httpx.get(f"{world.url}/metrics").text
    values = {}
    for line in text.splitlines():
        if line.startswith("luminal_") and 'model="tiny-llama"' in line:
            name = line.split("{")[0]
            values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    assert values["luminal_time_to_first_token_seconds_count"] >= 1
    assert values["luminal_inter_token_latency_seconds_count"] >= 5  # 6 tokens, 5 gaps
    assert values["luminal_generation_tokens"] >= 6 and values["luminal_prompt_tokens"] >= 1
    assert "luminal_sequences_running{" in text and "luminal_kv_cache_positions{" in text
    totals = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("luminal_kv_cache_blocks_capacity")
    ]
    in_use = [
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("luminal_kv_cache_blocks_in")
    ]
    assert in_use and all(n == 0 for n in in_use)  # the finished sequence gave its blocks back
    assert any(n > 0 for n in totals)  # the pool's size


def _reference_logprobs(world, model: str, prompt: list[int], generated: list[int]) -> torch.Tensor:
    """torch.log_softmax (float64) of transformers' logits at each generated position: [len(generated), vocab]."""
    with torch.no_grad():
        logits = world.models[model](torch.tensor([prompt + generated])).logits[0].double()
    return torch.log_softmax(logits, -1)[len(prompt) - 1 : len(prompt) - 1 + len(generated)]


def _check_against(reference: torch.Tensor, generated: list[int], chosen: list[float], tops: list[list[float]]):
    assert len(chosen) == len(generated) == len(tops)
    for i, token in enumerate(generated):
        assert abs(chosen[i] - reference[i, token].item()) < 1e-4
        want = torch.topk(reference[i], len(tops[i])).values.tolist()
        assert sorted(tops[i], reverse=True) == pytest.approx(want, abs=1e-4)


@pytest.mark.parametrize("model", MODELS)
def test_completion_logprobs_equal_transformers_streamed_and_not(world, model):
    ids = world.tokenizer(PROMPTS[0])["input_ids"]
    generated = world.generate(model, ids, 6)
    client = world.client()
    kwargs = dict(model=model, prompt=PROMPTS[0], max_tokens=6, temperature=0, logprobs=3,
                  extra_body={"ignore_eos": True})  # fmt: skip
    got = client.completions.create(**kwargs).choices[0].logprobs
    assert got.tokens == [world.tokenizer.decode([t]) for t in generated]
    assert got.text_offset == [sum(len(t) for t in got.tokens[:i]) for i in range(6)]
    reference = _reference_logprobs(world, model, ids, generated)
    _check_against(reference, generated, got.token_logprobs, [[] for _ in generated])
    for row, top in zip(reference, got.top_logprobs, strict=True):  # {text: logprob}: equal texts share a key
        best = torch.topk(row, 3)
        want = {world.tokenizer.decode([t]): lp for t, lp in zip(best.indices.tolist(), best.values.tolist())}
        assert top.keys() == want.keys() and all(abs(top[k] - want[k]) < 1e-4 for k in top)
    streamed = {"tokens": [], "token_logprobs": [], "text_offset": [], "top_logprobs": []}
    for chunk in client.completions.create(**kwargs, stream=True):
        for key, values in streamed.items():
            values.extend(getattr(chunk.choices[0].logprobs, key))
    assert streamed == {key: getattr(got, key) for key in streamed}


@pytest.mark.parametrize("model", MODELS)
def test_chat_logprobs_equal_transformers_streamed_and_not(world, model):
    ids = world.tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    generated = world.generate(model, ids, 5)
    client = world.client()
    kwargs = dict(model=model, messages=CHAT, max_tokens=5, temperature=0, logprobs=True, top_logprobs=4,
                  extra_body={"ignore_eos": True})  # fmt: skip
    content = client.chat.completions.create(**kwargs).choices[0].logprobs.content
    assert [c.token for c in content] == [world.tokenizer.decode([t]) for t in generated]
    assert all(c.bytes == list(c.token.encode()) and len(c.top_logprobs) == 4 for c in content)
    tops = [[t.logprob for t in c.top_logprobs] for c in content]
    _check_against(_reference_logprobs(world, model, ids, generated), generated, [c.logprob for c in content], tops)
    streamed = [c for chunk in client.chat.completions.create(**kwargs, stream=True) if chunk.choices[0].logprobs
                for c in chunk.choices[0].logprobs.content]  # fmt: skip
    assert [c.model_dump() for c in streamed] == [c.model_dump() for c in content]


def test_answers_name_the_version_that_generated_them(world):
    http = httpx.Client(base_url=world.url, headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"}, timeout=60)
    completion = {"model": "tiny-gpt2", "prompt": PROMPTS[1], "max_tokens": 2}
    chat = {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert http.put("/v1/models/tiny-gpt2/traffic", json={"split": {"1": 100}}).status_code == 200
    try:
        for path, body in (("/openai/v1/completions", completion), ("/openai/v1/chat/completions", chat)):
            for stream in (False, True):
                answer = http.post(path, json=body | {"stream": stream})
                assert answer.status_code == 200, answer.text
                assert answer.headers["x-luminal-model-version"] == "1", (path, stream)
    finally:
        http.delete("/v1/models/tiny-gpt2/traffic")
