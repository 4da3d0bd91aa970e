"""LoRA adapters through the OpenAI-compatible API, with the real `openai` client: a Llama deployed with two
PEFT adapters lists each as a model (its base as parent), and a completion called by an adapter's name equals
transformers' greedy answer with PEFT's merged adapter, while the base's name still gets the base's."""

import asyncio

import httpx
import openai
import pytest
from tokenizers import Tokenizer

from luminal.gateway.app import create_app
from luminal.llm_package import build_package, save_package
from luminal.store.settings import Settings
from tests.gateway.conftest import BOOTSTRAP_KEY, deploy_and_wait, upload
from tests.gateway.tenancy import ADMIN_TOKEN
from tests.gateway.threaded_server import ThreadedServer, free_port
from tests.llm_folders import greedy_answer, hf_folder
from tests.lora_adapters import make_adapters

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
        assert deploy_and_wait(http, "tiny-llama", gpu_type="cpu")["status"] == "ready"
    yield url, {"tiny-llama": hf, **merged}, Tokenizer.from_file(str(tmp / "base" / "tokenizer.json"))
    server.stop()


def test_adapters_are_listed_as_models_of_their_base(world):
    url, _, _ = world
    client = openai.OpenAI(base_url=f"{url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0)
    listed = {m.id: m for m in client.models.list().data}
    assert set(listed) == {"tiny-llama", "terse", "chatty"}
    assert listed["terse"].parent == listed["chatty"].parent == "tiny-llama"


def test_each_model_name_gets_its_adapter_in_one_batch(world):
    url, references, tokenizer = world
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
    url, _, _ = world
    client = openai.OpenAI(base_url=f"{url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-adapter", prompt="hi", max_tokens=1)
