"""The LLM package: built from a Hugging Face folder, saved and read back with the same graphs, weights (held
once) and tokenizer files; hostile or broken files are refused with a message naming the defect."""

import io
import zipfile

import numpy as np
import pytest

import luminal as lm
from luminal.llm_package import LLMPackageError, build_package, is_llm_package, load_package, save_package
from tests.llm_folders import CHAT_TEMPLATE, hf_folder


@pytest.fixture(scope="module")
def package_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama")
    hf_folder(folder, "llama")
    path = folder / "model.lpkg"
    save_package(build_package(folder, max_batch=4, positions=64), path)
    return path


def test_round_trip_keeps_graphs_weights_and_tokenizer(package_file):
    package = load_package(package_file)
    assert is_llm_package(package_file)
    assert (package.max_batch, package.max_positions, package.graphs.layers) == (4, 64, 2)
    assert package.tokenizer_config["chat_template"] == CHAT_TEMPLATE
    assert package.config["model_type"] == "llama"
    prefill, step = package.graphs.prefill, package.graphs.step
    name = "model.embed_tokens.weight"
    assert np.shares_memory(prefill.weight_data[name], step.weight_data[name])  # one copy of each weight
    with zipfile.ZipFile(package_file) as zf:
        assert sum(n.endswith(".safetensors") for n in zf.namelist()) == 1
    ids = np.array([[5, 9, 17]], np.int64)
    out = lm.run(prefill, {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(3)[None]})
    assert out["logits"].shape == (1, 320) and out["present.1.value"].shape == (1, 2, 3, 8)


def test_the_paged_step_round_trips_with_its_donated_pools(package_file):
    package = load_package(package_file)
    assert package.block_size == 16 and package.paged is not None
    assert package.paged.donated == {n: n for n in package.paged.inputs if n.startswith("pool.")}
    assert len(package.paged.donated) == 2 * 2  # a key and a value pool per layer
    name = "model.embed_tokens.weight"
    assert np.shares_memory(package.graphs.prefill.weight_data[name], package.paged.weight_data[name])


def test_a_paged_step_without_its_donations_is_refused(package_file, tmp_path):
    package = load_package(package_file)
    package.paged.donated = {}
    save_package(package, tmp_path / "undonated.lpkg")
    with pytest.raises(LLMPackageError, match="must donate each pool input"):
        load_package(tmp_path / "undonated.lpkg")


def test_the_chunk_graph_round_trips_and_goes_only_with_a_paged_step(package_file, tmp_path):
    package = load_package(package_file)
    chunk = package.chunk
    assert chunk is not None and chunk.donated == package.paged.donated
    assert chunk.nodes[chunk.inputs["input_ids"]].shape[1].hi == 256  # up to 256 prompt tokens a run
    package.paged = None
    with pytest.raises(lm.GraphError, match="a chunk graph goes with a paged step"):
        save_package(package, tmp_path / "chunk-only.lpkg")
    package = load_package(package_file)
    package.chunk.donated = {}
    save_package(package, tmp_path / "undonated.lpkg")
    with pytest.raises(LLMPackageError, match="chunk.json must donate each pool input"):
        load_package(tmp_path / "undonated.lpkg")


def _rewritten(path, change) -> bytes:
    """The package with its entries passed through `change(name, data) -> (name, data) | None`."""
    buf = io.BytesIO()
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(buf, "w") as dst:
        for info in src.infolist():
            changed = change(info.filename, src.read(info))
            if changed is not None:
                dst.writestr(changed[0], changed[1])
    return buf.getvalue()


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda n, d: (n, d + b" ") if n == "tokenizer.json" else (n, d), "sha256"),
        (lambda n, d: None if n == "step.json" else (n, d), "lists entries"),
        (lambda n, d: ("../evil.json", d) if n == "config.json" else (n, d), "unexpected entry"),
        (lambda n, d: (n, d.replace(b"luminal.llm", b"luminal.xxx")) if n == "manifest.json" else (n, d), "format"),
    ],
)
def test_defects_are_named(package_file, change, message):
    with pytest.raises(LLMPackageError, match=message):
        load_package(_rewritten(package_file, change))


def test_a_graph_file_is_not_a_package(tmp_path):
    g = lm.Graph()
    g.input("x", (2,)).exp2().output("y")
    lm.save(g, tmp_path / "g.lgraph")
    assert not is_llm_package(tmp_path / "g.lgraph")


def test_a_folder_without_tokenizer_is_refused(tmp_path):
    hf_folder(tmp_path, "gpt2")
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        build_package(tmp_path)
