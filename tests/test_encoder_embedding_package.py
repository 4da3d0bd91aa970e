"""The embedding package of a plain Hugging Face BERT folder (no modules.json), deployed with a pooling choice:
its graph, run on a right-padded batch, gives transformers' hidden states pooled so (mean, cls, last; normalised
or not); and a hostile folder (a symlink out of it, an oversized tokenizer, a module path that climbs out, no
pooling said) is refused naming the problem."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import luminal as lm
from luminal.embedding_package import build_package, load_package, save_package
from luminal.folder_files import FolderFileError
from tests.encoder_folders import bert_folder, pooled, wordpiece_tokenizer

TEXTS = ["the man is eating food", "rain", "two men pushed carts through the woods fast"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("bert") / "tiny-bert"
    return path, bert_folder(path)


def _padded(ids: list[list[int]]) -> dict[str, np.ndarray]:
    width = max(map(len, ids))
    batch = np.zeros((len(ids), width), np.int64)
    mask = np.zeros_like(batch)
    for k, seq in enumerate(ids):
        batch[k, : len(seq)], mask[k, : len(seq)] = seq, 1
    return {"input_ids": batch, "attention_mask": mask}


@pytest.mark.parametrize(("pooling", "normalize"), [("mean", False), ("cls", True), ("last", False), ("last", True)])
def test_an_encoder_folder_embeds_as_transformers_pools(folder, tmp_path, pooling, normalize):
    path, model = folder
    saved = tmp_path / "bert.lemb"
    save_package(build_package(path, max_batch=4, pooling=pooling, normalize=normalize), saved)
    package = load_package(saved)
    assert (package.max_seq_length, package.dimensions, package.normalized) == (16, 32, normalize)
    ids = [e.ids for e in wordpiece_tokenizer().encode_batch(TEXTS)]
    got = lm.run(package.graph, _padded(ids))["sentence_embedding"]
    np.testing.assert_allclose(got, pooled(model, ids, pooling, normalize), atol=1e-4)


def test_an_encoder_folder_needs_a_pooling(folder):
    with pytest.raises(ValueError, match="--pooling"):
        build_package(folder[0])


def test_a_tokenizer_that_is_a_symlink_out_of_the_folder_is_refused(folder, tmp_path):
    copy = tmp_path / "linked"
    copy.mkdir()
    for name in os.listdir(folder[0]):
        if name != "tokenizer.json":
            (copy / name).symlink_to(folder[0] / name)  # the folder's own files, linked from inside: fine
    outside = tmp_path / "secret.json"
    outside.write_text(json.dumps({"not": "a tokenizer"}))
    (copy / "tokenizer.json").symlink_to(outside)
    with pytest.raises(FileNotFoundError, match="outside the model folder"):
        build_package(copy, pooling="mean")


def test_an_oversized_tokenizer_is_not_read(folder, tmp_path):
    copy = tmp_path / "huge"
    copy.mkdir()
    for name in os.listdir(folder[0]):
        (copy / name).write_bytes((folder[0] / name).read_bytes())
    with (copy / "tokenizer.json").open("r+b") as f:
        f.truncate(65 << 20)  # sparse: the size is what is checked, before any byte is read
    with pytest.raises(FileNotFoundError, match="at most"):
        build_package(copy, pooling="mean")


def test_a_transformer_module_outside_the_root_is_refused(tmp_path):
    (tmp_path / "modules.json").write_text(json.dumps([
        {"path": "0_Transformer", "type": "sentence_transformers.models.Transformer"},
        {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]))  # fmt: skip
    (tmp_path / "tokenizer.json").write_text(wordpiece_tokenizer().to_str())
    with pytest.raises(NotImplementedError, match="0_Transformer"):
        build_package(tmp_path)


@pytest.mark.parametrize("path", ["../elsewhere", "/etc", "1_Pooling/../../x"])
def test_a_module_path_out_of_the_folder_is_refused(tmp_path, path):
    (tmp_path / "modules.json").write_text(json.dumps([
        {"path": "", "type": "sentence_transformers.models.Transformer"},
        {"path": path, "type": "sentence_transformers.models.Pooling"},
    ]))  # fmt: skip
    (tmp_path / "tokenizer.json").write_text(wordpiece_tokenizer().to_str())
    with pytest.raises(FolderFileError, match="not a path inside|outside"):
        build_package(tmp_path)
