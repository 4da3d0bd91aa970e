"""LoRA adapters through the OpenAI-compatible API, with the real `openai` client: a Llama deployed with two
PEFT adapters lists each as a model (its base as parent), and a completion called by an adapter's name equals
transformers' greedy answer with PEFT's merged adapter, while the base's name still gets the base's. An adapter
added to the live deployment through the management API is listed and served at once, one that does not fit is
refused 400 naming why, and a removed one is a 404 again."""

import asyncio

import httpx
import openai
import pytest
from tokenizers import Tokenizer
from typer.testing import CliRunner

from luminal.cli.main import app
from luminal.gateway.app import create_app
from luminal.llm_package import build_package, save_package
from luminal.lora_adapter import upload_body
from luminal.store.settings import Settings
from tests.gateway.conftest import BOOTSTRAP_KEY, deploy_and_wait, upload
from tests.gateway.tenancy import ADMIN_TOKEN
from tests.gateway.test_llm_routing_api import wait_for
from tests.gateway.threaded_server import ThreadedServer, free_port
from tests.llm_folders import greedy_answer, hf_folder
from tests.lora_adapters import make_adapter, make_adapters

NEW_TOKENS = 6


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lora_api")
    settings = Settings(data_dir=tmp / "data", database_url=f"sqlite:///{tmp / 'meta.db'}",
                        bootstrap_key=BOOTSTRAP_KEY, compile_runner="thread", admin_token=ADMIN_TOKEN)  # fmt: skip
    port = free_port()
    server = ThreadedServer(create_app(settings), port)
    server.start()
    url = f"http://127.0.0.1:{port}"
    hf = hf_folder(tmp / "base")
    merged = make_adapters(hf, tmp)
    package = build_package(tmp / "base", 8, 64, lora={name: tmp / name for name in merged})
    save_package(package, tmp / "m.lpkg")
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"}, timeout=60) as http:
        assert upload(http, "tiny-llama", (tmp / "m.lpkg").read_bytes()).status_code == 201
        deployment = deploy_and_wait(http, "tiny-llama", gpu_type="cpu")
        assert deployment["status"] == "ready"
    late = make_adapter(hf, tmp / "late", 6, 12, ["k_proj", "o_proj", "down_proj"], seed=11)
    make_adapter(hf, tmp / "too-wide", 20, 8, ["q_proj"], seed=12)
    tokenizer = Tokenizer.from_file(str(tmp / "base" / "tokenizer.json"))
    yield url, {"tiny-llama": hf, **merged, "late": late}, tokenizer, deployment["id"], tmp
    server.stop()


def test_adapters_are_listed_as_models_of_their_base(world):
    url, *_ = world
    client = openai.OpenAI(base_url=f"{url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0)
    listed = {m.id: m for m in client.models.list().data}
    assert set(listed) == {"tiny-llama", "terse", "chatty"}
    assert listed["terse"].parent == listed["chatty"].parent == "tiny-llama"


def test_each_model_name_gets_its_adapter_in_one_batch(world):
    url, references, tokenizer, *_ = world
    client = openai.AsyncOpenAI(base_url=f"{url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0, timeout=60)
    prompt = [5, 17, 40, 99, 3, 250]

    async def complete(name):
        answer = await client.completions.create(
            model=name, prompt=prompt, max_tokens=NEW_TOKENS, temperature=0, extra_body={"ignore_eos": True}
        )
        return answer.choices[0].text, answer.model

    async def all_at_once():  # sent together: the worker's engine steps them in one batch
        return await asyncio.gather(*(complete(n) for n in ("terse", "tiny-llama", "chatty")))

    results = asyncio.run(all_at_once())
    texts = {}
    for name, (text, model) in zip(("terse", "tiny-llama", "chatty"), results):
        assert model == name
        texts[name] = text
    wants = {name: greedy_answer(references[name], prompt, NEW_TOKENS) for name in texts}
    assert len({tuple(w) for w in wants.values()}) == 3  # the adapters change the answer
    for name, want in wants.items():
        assert texts[name] == tokenizer.decode(want), name


def test_an_unknown_model_is_still_a_404(world):
    url, *_ = world
    client = openai.OpenAI(base_url=f"{url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-adapter", prompt="hi", max_tokens=1)


def _post_adapter(url, deployment_id, name, folder):
    body = upload_body(name, folder)
    headers = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}
    return httpx.post(f"{url}/v1/deployments/{deployment_id}/adapters", json=body, headers=headers, timeout=60)


def test_an_adapter_added_live_is_served_then_removed(world):
    url, references, tokenizer, deployment_id, tmp = world
    client = openai.OpenAI(base_url=f"{url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0, timeout=60)
    client.completions.create(model="tiny-llama", prompt=[5, 6], max_tokens=1)  # a worker's engine runs already
    refused = _post_adapter(url, deployment_id, "too-wide", tmp / "too-wide")
    assert refused.status_code == 400 and "rank 20 is over" in refused.text
    assert _post_adapter(url, deployment_id, "tiny-llama", tmp / "late").status_code == 409  # a model's name
    added = _post_adapter(url, deployment_id, "late", tmp / "late")
    assert added.status_code == 201, added.text
    assert "late" in {m.id for m in client.models.list().data}
    prompt = [9, 44, 120, 7]
    answer = client.completions.create(model="late", prompt=prompt, max_tokens=NEW_TOKENS, temperature=0,
                                       extra_body={"ignore_eos": True})  # fmt: skip
    want = greedy_answer(references["late"], prompt, NEW_TOKENS)
    assert want != greedy_answer(references["tiny-llama"], prompt, NEW_TOKENS)
    assert answer.choices[0].text == tokenizer.decode(want)
    headers = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}
    listed = httpx.get(f"{url}/v1/deployments/{deployment_id}/adapters", headers=headers).json()
    assert {(a["name"], a["added_live"]) for a in listed} == {("terse", False), ("chatty", False), ("late", True)}
    gone = httpx.delete(f"{url}/v1/deployments/{deployment_id}/adapters/late", headers=headers)
    assert gone.status_code == 204
    assert "late" not in {m.id for m in client.models.list().data}
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="late", prompt=prompt, max_tokens=1)


def test_the_worker_reports_the_adapters_it_serves(world):
    """What adapter-aware routing reads (routing.choose_worker): the deployment's adapters, as its worker's engine
    holds them, in the worker's load report."""
    url, _, _, deployment_id, _ = world
    headers = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}

    def reported() -> set[str]:
        workers = httpx.get(f"{url}/v1/deployments/{deployment_id}/workers", headers=headers).json()["workers"]
        return {name for w in workers if "sequences" in w for name in w["sequences"]["lora_adapters"]}

    wait_for(lambda: reported() == {"terse", "chatty"}, "the worker reports the deployment's adapters")


def test_the_cli_adds_lists_and_removes_an_adapter(world):
    url, references, tokenizer, deployment_id, tmp = world
    env = {"LUMINAL_URL": url, "LUMINAL_API_KEY": BOOTSTRAP_KEY}
    added = CliRunner().invoke(app, ["adapters", "add", str(deployment_id), "late-cli", str(tmp / "late")], env=env)
    assert added.exit_code == 0, added.output
    listed = CliRunner().invoke(app, ["adapters", "ls", str(deployment_id)], env=env)
    assert "late-cli" in listed.output and "live" in listed.output and "terse" in listed.output
    client = openai.OpenAI(base_url=f"{url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0, timeout=60)
    answer = client.completions.create(model="late-cli", prompt=[3, 4, 5], max_tokens=3, temperature=0,
                                       extra_body={"ignore_eos": True})  # fmt: skip
    assert answer.choices[0].text == tokenizer.decode(greedy_answer(references["late"], [3, 4, 5], 3))
    wide = CliRunner().invoke(app, ["adapters", "add", str(deployment_id), "w", str(tmp / "too-wide")], env=env)
    assert wide.exit_code != 0 and "rank 20 is over" in wide.output
    removed = CliRunner().invoke(app, ["adapters", "rm", str(deployment_id), "late-cli"], env=env)
    assert removed.exit_code == 0, removed.output
    assert "late-cli" not in {m.id for m in client.models.list().data}
