"""`luminal deploy FOLDER` builds and uploads a Hugging Face language model (with its generation engine's
settings); `luminal complete` prints its greedy continuation (what transformers generates) and `luminal chat`
streams replies to typed lines, both at the --priority and within the --queue-timeout asked for."""

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from luminal.cli.main import app
from tests.gateway.conftest import BOOTSTRAP_KEY
from tests.llm_folders import hf_folder, hf_tokenizer

runner = CliRunner()


@pytest.fixture
def database_url(tmp_path: Path) -> str:  # SQLite only: the store is not what these tests exercise
    return f"sqlite:///{tmp_path / 'meta.db'}"


def test_deploy_folder_then_complete_and_chat(server, tmp_path):
    folder = tmp_path / "tiny-llama"
    model = hf_folder(folder, "llama")
    env = {"LUMINAL_URL": server.url, "LUMINAL_API_KEY": BOOTSTRAP_KEY}
    deployed = runner.invoke(app, ["deploy", str(folder), "--prefill-chunk", "32", "--max-waiting", "100"], env=env)
    assert deployed.exit_code == 0, deployed.output
    assert f"{server.url}/openai/v1" in deployed.output and "tiny-llama" in deployed.output
    with server.client() as http:
        (deployment,) = http.get("/v1/deployments").json()
    assert (deployment["prefill_chunk"], deployment["max_waiting"]) == (32, 100)

    tokenizer = hf_tokenizer(folder)
    ids = tokenizer("the quick brown")["input_ids"]
    with torch.no_grad():
        want = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, pad_token_id=0)
    done = runner.invoke(app, ["complete", "tiny-llama", "the quick brown", "--max-tokens", "8", "--temperature", "0"],
                         env=env)  # fmt: skip
    assert done.exit_code == 0, done.output
    assert done.output == tokenizer.decode(want[0, len(ids) :], skip_special_tokens=True) + "\n"

    chatted = runner.invoke(app, ["chat", "tiny-llama", "--max-tokens", "5", "--temperature", "0"], input="hi\nhello\n",
                            env=env)  # fmt: skip
    assert chatted.exit_code == 0, chatted.output
    assert chatted.output.count("> ") == 3  # two replies, then the prompt that met the end of input

    ((_, engine),), submitted = server.platform.generation.snapshot(), []
    submit = engine.submit

    def recording(prompt, params, loop, account=None, priority=None, timeout_s=None, waited_s=0.0):
        submitted.append((priority, timeout_s))
        return submit(prompt, params, loop, account, priority, timeout_s, waited_s)

    engine.submit = recording
    urgent = ["--priority", "1", "--queue-timeout", "2.5", "--max-tokens", "8", "--temperature", "0"]
    again = runner.invoke(app, ["complete", "tiny-llama", "the quick brown", *urgent], env=env)
    assert again.exit_code == 0 and again.output == done.output, again.output
    chatted = runner.invoke(app, ["chat", "tiny-llama", "--priority", "10", "--max-tokens", "2"], input="hi\n", env=env)
    assert chatted.exit_code == 0, chatted.output
    assert submitted == [(1, 2.5), (10, server.platform.settings.request_timeout_s)]
    refused = runner.invoke(app, ["chat", "tiny-llama", "--priority", "11"], input="hi\n", env=env)
    assert refused.exit_code == 1 and "1 (most urgent) to 10" in refused.output, refused.output
    del engine.submit

    missing = runner.invoke(app, ["complete", "nope", "x"], env=env)
    assert missing.exit_code == 1 and "nope" in missing.output
