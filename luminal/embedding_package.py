"""The embedding package (`.lemb`): what `luminal deploy FOLDER` uploads for a sentence-transformers folder, so the
deployment carries its tokenizer and clients send text.

One zip bundle (`luminal.zip_bundle`) of:
  manifest.json    format, versions, max_seq_length (tokens per input, [CLS] and [SEP] included), dimensions
  model.lgraph     the sentence graph as a `.lgraph` (input_ids, attention_mask -> sentence_embedding), whose
                   own loader checks it and keeps its padding declarations
  tokenizer.json   the Hugging Face `tokenizers` tokenizer

Reading checks the file like a `.lgraph` and never executes anything from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from luminal.graph import Graph
from luminal.graph_file import MAX_FILE_BYTES, graph_to_bytes, load_graph
from luminal.graph_json import GraphFileError
from luminal.zip_bundle import BundleFormat, bundle_format_name, read_bundle, write_bundle


class EmbeddingPackageError(GraphFileError):
    """An embedding package is malformed or inconsistent (a GraphFileError, so uploads answer 400)."""


GRAPH, TOKENIZER = "model.lgraph", "tokenizer.json"
OUTPUT = "sentence_embedding"
FORMAT = BundleFormat(
    name="luminal.embedding",
    version=1,
    caps={GRAPH: MAX_FILE_BYTES, TOKENIZER: 64 << 20},  # tokenizers of 256k-token vocabularies reach ~35 MiB
    required=frozenset({GRAPH, TOKENIZER}),
    error=EmbeddingPackageError,
    stored=frozenset({GRAPH}),  # weights barely compress
)
# sentence-transformers' default when a folder has no sentence_bert_config.json is the model's position limit;
# the folders it writes always name one.
SENTENCE_CONFIG = "sentence_bert_config.json"


@dataclass
class EmbeddingPackage:
    graph: Graph  # input_ids, attention_mask [batch, seq] -> sentence_embedding [batch, dimensions]
    tokenizer_json: str
    max_seq_length: int

    @property
    def dimensions(self) -> int:
        return int(self.graph.nodes[self.graph.outputs[OUTPUT]].shape[-1])


def build_package(folder: str | Path, max_batch: int = 64) -> EmbeddingPackage:
    """The folder's sentence graph (sequences up to its max_seq_length) with its weights and tokenizer."""
    from luminal.nn.models.sentence import sentence_graph

    folder = Path(folder)
    if not (folder / TOKENIZER).exists():
        raise FileNotFoundError(f"{folder} has no {TOKENIZER}: an embedding model is served with its tokenizer")
    max_seq = _max_seq_length(folder)
    graph = sentence_graph(folder, max_batch=max_batch, max_seq=max_seq)
    return EmbeddingPackage(graph, (folder / TOKENIZER).read_text(encoding="utf-8"), max_seq)


def _max_seq_length(folder: Path) -> int:
    config = folder / SENTENCE_CONFIG
    limit = json.loads(config.read_text()).get("max_seq_length") if config.exists() else None
    if limit is None:
        limit = json.loads((folder / "config.json").read_text())["max_position_embeddings"]
    if type(limit) is not int or limit < 2:
        raise ValueError(f"{SENTENCE_CONFIG}: max_seq_length must be an integer of at least 2, got {limit!r}")
    return limit


def save_package(package: EmbeddingPackage, path: Any) -> None:
    """Write the package atomically."""
    entries = {GRAPH: [graph_to_bytes(package.graph)], TOKENIZER: [package.tokenizer_json.encode()]}
    fields = {"max_seq_length": package.max_seq_length, "dimensions": package.dimensions}
    write_bundle(FORMAT, path, entries, fields)


def is_embedding_package(path: Any) -> bool:
    """Whether the file at `path` says it is an embedding package (only its manifest is read)."""
    return bundle_format_name(path, EmbeddingPackageError) == FORMAT.name


def load_package(source: Any) -> EmbeddingPackage:
    """Read a package (a path or its bytes); any defect raises EmbeddingPackageError (or the `.lgraph` loader's
    GraphFileError) naming it."""
    manifest, raw = read_bundle(FORMAT, source)
    graph = load_graph(raw.pop(GRAPH))
    package = EmbeddingPackage(graph, _tokenizer_json(raw), manifest.get("max_seq_length"))
    _check(package, manifest)
    return package


def read_tokenizer(source: Any) -> Tokenizer:
    """The tokenizer of a package checked whole when it was uploaded: its digests are checked again, its graph
    is not decoded (the gateway only turns text into token ids)."""
    _, raw = read_bundle(FORMAT, source)
    return text_tokenizer(_tokenizer_json(raw))


def _tokenizer_json(raw: dict[str, bytearray]) -> str:
    """The tokenizer entry's text, once `tokenizers` has read it."""
    try:
        text = bytes(raw[TOKENIZER]).decode("utf-8")
        Tokenizer.from_str(text)
    except Exception as e:  # not UTF-8, or `tokenizers` refusing it (it raises a bare Exception)
        raise EmbeddingPackageError(f"{TOKENIZER} cannot be read: {e}") from None
    return text


def text_tokenizer(tokenizer_json: str) -> Tokenizer:
    """The tokenizer with the file's own truncation and padding turned off: the gateway checks lengths itself
    (an over-long input is refused unless truncation is asked for) and the batcher pads."""
    tokenizer = Tokenizer.from_str(tokenizer_json)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def _check(package: EmbeddingPackage, manifest: dict[str, Any]) -> None:
    graph, limit = package.graph, package.max_seq_length
    if set(graph.inputs) != {"input_ids", "attention_mask"} or set(graph.outputs) != {OUTPUT}:
        raise EmbeddingPackageError(
            f"{GRAPH} must map input_ids and attention_mask to {OUTPUT}: inputs {sorted(graph.inputs)[:4]}, "
            f"outputs {sorted(graph.outputs)[:4]}"
        )
    if type(limit) is not int or limit < 2:
        raise EmbeddingPackageError(f"manifest: max_seq_length must be an integer of at least 2, got {limit!r:.40}")
    if manifest.get("dimensions") != package.dimensions:
        raise EmbeddingPackageError(f"manifest: dimensions disagree with {OUTPUT}'s {package.dimensions}")


__all__ = [
    "FORMAT",
    "EmbeddingPackage",
    "EmbeddingPackageError",
    "build_package",
    "is_embedding_package",
    "load_package",
    "read_tokenizer",
    "save_package",
]
