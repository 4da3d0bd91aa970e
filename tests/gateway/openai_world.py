"""One gateway for the OpenAI-compatible API tests: a real uvicorn server on SQLite with a tiny Llama and a tiny
GPT-2 deployed from Hugging Face folders (as `luminal deploy FOLDER` uploads them), and the transformers models
and tokenizer that are the reference."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
import torch

from luminal.gateway.app import create_app
from luminal.llm_package import build_package, save_package
from luminal.store import deployments
from luminal.store.settings import Settings
from luminal.store.tenants import tenant_for_key
from tests.gateway.conftest import BOOTSTRAP_KEY, deploy_and_wait, upload
from tests.gateway.tenancy import ADMIN_TOKEN
from tests.gateway.threaded_server import ThreadedServer, free_port
from tests.llm_folders import hf_folder, hf_tokenizer
from tests.tls_context import tls_context

MAX_BATCH, POSITIONS = 16, 96
# Deployment settings of each model beyond the defaults: GPT-2's generation engine is configured.
SETTINGS = {"llama": {}, "gpt2": {"prefill_chunk": 24, "max_waiting": 200}}


@dataclass
class World:
    url: str
    app: object
    models: dict  # name -> transformers model
    tokenizer: object  # both models share the tokenizer
    folders: dict = field(default_factory=dict)  # name -> its Hugging Face folder (its tokenizer and chat template)

    def client(self, key: str = BOOTSTRAP_KEY) -> openai.OpenAI:
        http = openai.DefaultHttpxClient(verify=tls_context())  # the CA bundle parsed once (conftest.tls_context)
        return openai.OpenAI(base_url=f"{self.url}/openai/v1", api_key=key, max_retries=0, timeout=60, http_client=http)

    def async_client(self) -> openai.AsyncOpenAI:
        http = openai.DefaultAsyncHttpxClient(verify=tls_context())
        return openai.AsyncOpenAI(base_url=f"{self.url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0, timeout=60,
                                  http_client=http)  # fmt: skip

    def engine(self, name: str):
        """The running engine of the model `name`, held by its worker (a thread of the gateway's process), which
        is started if it was not."""
        platform = self.app.state.platform
        with platform.db.session() as session:
            tenant = tenant_for_key(session, BOOTSTRAP_KEY)
            key = deployments.deployment_for_model(session, tenant, name, None).program_key
        if not any(k == key for k, _ in platform.generation.snapshot()):  # a first sequence starts its worker
            self.client().completions.create(model=name, prompt="hi", max_tokens=1)
        return platform.generation.get(key)

    def generate(self, name: str, prompt_ids: list[int], max_new: int, eos: bool = False) -> list[int]:
        """transformers' greedy generate() of the continuation (stopping at EOS only when `eos`)."""
        with torch.no_grad():
            ids = torch.tensor([prompt_ids])
            out = self.models[name].generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new,
                do_sample=False,
                pad_token_id=0,
                eos_token_id=1 if eos else None,
            )
        return out[0, len(prompt_ids) :].tolist()


def start_world(
    tmp: Path, kinds: tuple[str, ...] = ("llama", "gpt2"), positions: int = POSITIONS, templates: dict | None = None
):
    """(World, stop) with the models of `kinds` deployed (both unless told), each serving `positions` tokens of
    prompt and answer, a kind named in `templates` with that chat template instead of the tests' own."""
    settings = Settings(data_dir=tmp / "data", database_url=f"sqlite:///{tmp / 'meta.db'}",
                        bootstrap_key=BOOTSTRAP_KEY, compile_runner="thread", admin_token=ADMIN_TOKEN)  # fmt: skip
    app = create_app(settings)
    port = free_port()
    server = ThreadedServer(app, port)
    server.start()
    url = f"http://127.0.0.1:{port}"
    models, folders = {}, {}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"}, timeout=60) as http:
        for kind in kinds:
            folder = tmp / kind
            models[f"tiny-{kind}"], folders[f"tiny-{kind}"] = hf_folder(folder, kind), folder
            if kind in (templates or {}):
                config = json.loads((folder / "tokenizer_config.json").read_text())
                (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": templates[kind]}))
            save_package(build_package(folder, MAX_BATCH, positions), folder / "model.lpkg")
            assert upload(http, f"tiny-{kind}", (folder / "model.lpkg").read_bytes()).status_code == 201
            assert deploy_and_wait(http, f"tiny-{kind}", gpu_type="cpu", **SETTINGS.get(kind, {}))["status"] == "ready"

    return World(url, app, models, hf_tokenizer(tmp / kinds[0]), folders), server.stop
