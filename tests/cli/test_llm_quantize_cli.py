"""`luminal deploy FOLDER --quantize int8`: the language model is uploaded with Q8_0 weights and answers through
the OpenAI-compatible API with the float model's greedy tokens (for a mixture of experts, whose experts are
quantised too, the float model over its weights rounded to Q8_0); unknown schemes and graph files are refused."""

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from luminal.cli.main import app
from luminal.llm_package import load_package
from tests.gateway.conftest import BOOTSTRAP_KEY
from tests.llm_folders import hf_folder, hf_tokenizer
from tests.quantize.q8_0_rounding import round_to_q8_0

runner = CliRunner()


@pytest.fixture
def database_url(tmp_path: Path) -> str:  # SQLite only: the store is not what these tests exercise
    return f"sqlite:///{tmp_path / 'meta.db'}"


@pytest.mark.parametrize("value", ["int4", "fp8", "INT8"])
def test_unknown_quantisations_are_refused_before_anything_is_built(tmp_path, value):
    result = runner.invoke(app, ["deploy", str(tmp_path), "--quantize", value], env={"LUMINAL_URL": "http://x"})
    assert result.exit_code == 1 and "--quantize" in result.output and "int8" in result.output


def test_quantize_applies_to_language_model_folders_only(tmp_path):
    graph = tmp_path / "model.lgraph"
    graph.write_bytes(b"PK")
    result = runner.invoke(app, ["deploy", str(graph), "--quantize", "int8"], env={"LUMINAL_URL": "http://x"})
    assert result.exit_code == 1 and "folder" in result.output


def test_the_package_built_for_upload_holds_int8_weights(tmp_path):
    from luminal.cli import llm

    folder = tmp_path / "tiny-gpt2"
    hf_folder(folder, "gpt2")
    package = load_package(llm.llm_package_file(folder, 4, "int8"))
    assert package.quantize == "int8"
    assert package.graphs.step.weight_data["transformer.h.0.attn.c_attn.weight"].dtype == "int8"


@pytest.mark.parametrize("kind", ["llama", "mixtral_int8"])
def test_deploy_int8_then_complete_greedily(server, tmp_path, kind):
    """A Llama, and a Mixtral whose experts are quantised too: its reference is transformers over the weights
    rounded to Q8_0 (for the Llama, on this prompt, the float model's first 8 tokens are int8's: tests/quantize)."""
    folder = tmp_path / f"tiny-{kind}"
    model = hf_folder(folder, kind)
    if kind == "mixtral_int8":
        round_to_q8_0(model)
        model.save_pretrained(folder, safe_serialization=True)
    env = {"LUMINAL_URL": server.url, "LUMINAL_API_KEY": BOOTSTRAP_KEY}
    deployed = runner.invoke(app, ["deploy", str(folder), "--quantize", "int8"], env=env)
    assert deployed.exit_code == 0, deployed.output
    tokenizer = hf_tokenizer(folder)
    ids = tokenizer("the quick brown")["input_ids"]
    with torch.no_grad():
        want = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, pad_token_id=0)
    done = runner.invoke(app, ["complete", folder.name, "the quick brown", "--max-tokens", "8", "--temperature", "0"],
                         env=env)  # fmt: skip
    assert done.exit_code == 0, done.output
    assert done.output == tokenizer.decode(want[0, len(ids) :], skip_special_tokens=True) + "\n"
