"""A language-model deployment for a GPU type no worker here can provide is handled as any other deployment's:
compiled, shown `unschedulable` with the reason, its requests answered 503 naming it, nothing queued or billed."""

from __future__ import annotations

import pytest

from luminal.llm_package import build_package, save_package
from luminal.provisioner import backends
from luminal.provisioner.device_offer import DeviceOffer
from tests.gateway.conftest import deploy_and_wait, upload
from tests.llm_folders import hf_folder

NO_GPU = "no worker can provide h100: this platform's local provisioner found no GPU"


@pytest.fixture(autouse=True)
def no_gpus(monkeypatch):
    monkeypatch.setattr(backends, "local_offer", lambda: DeviceOffer(()))


def test_an_h100_language_model_without_a_gpu_is_unschedulable_and_refused_by_name(server, tmp_path):
    folder = tmp_path / "llama"
    hf_folder(folder, "llama")
    save_package(build_package(folder, 4, 32), folder / "model.lpkg")
    http = server.client()
    assert upload(http, "tiny-llama", (folder / "model.lpkg").read_bytes()).status_code == 201
    d = deploy_and_wait(http, "tiny-llama", gpu_type="h100")
    assert (d["status"], d["error"]) == ("unschedulable", NO_GPU)
    r = http.post("/openai/v1/completions", json={"model": "tiny-llama", "prompt": "hello", "max_tokens": 2})
    assert r.status_code == 503 and NO_GPU in r.json()["error"]["message"]
    assert server.platform.sequences.depth(d["id"]) == 0
    assert http.get("/v1/usage/records").json() == []
