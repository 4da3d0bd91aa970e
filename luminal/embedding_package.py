"""The embedding package (`.lemb`): what `luminal deploy FOLDER` uploads for a sentence-transformers folder or a
Hugging Face encoder folder (with a pooling chosen at deploy), so the deployment carries its tokenizer and clients
send text. Only the folder's config, tokenizer, sentence-transformers JSON and weights are read (`folder_files`).

One zip bundle (`luminal.zip_bundle`) of:
  manifest.json    format, versions, max_seq_length (tokens per input, [CLS] and [SEP] included), dimensions,
                   normalized (whether embeddings have unit length), matryoshka (whether `dimensions` may cut them)
  model.lgraph     the sentence graph as a `.lgraph` (input_ids, attention_mask -> sentence_embedding), whose
                   own loader checks it and keeps its padding declarations
  tokenizer.json   the Hugging Face `tokenizers` tokenizer

Reading checks the file like a `.lgraph` and never executes anything from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from luminal.folder_files import FolderFileError, read_folder_bytes, read_folder_json
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
SENTENCE_CONFIG, MODULES, TOKENIZER_CONFIG = "sentence_bert_config.json", "modules.json", "tokenizer_config.json"
# config.json model types whose encoder luminal.nn builds (BertModel's checkpoint names).
ENCODER_MODEL_TYPES = frozenset({"bert"})


@dataclass
class EmbeddingPackage:
    graph: Graph  # input_ids, attention_mask [batch, seq] -> sentence_embedding [batch, dimensions]
    tokenizer_json: str
    max_seq_length: int
    normalized: bool = False  # the graph ends in an L2 normalisation: a cut embedding is normalised again
    # Trained so that a prefix of the embedding is an embedding (Matryoshka): only then may `dimensions` cut it.
    # Nothing in a folder says so reliably, so the one deploying declares it (`luminal deploy --matryoshka`).
    matryoshka: bool = False

    @property
    def dimensions(self) -> int:
        return int(self.graph.nodes[self.graph.outputs[OUTPUT]].shape[-1])


def build_package(
    folder: str | Path,
    max_batch: int = 64,
    pooling: str | None = None,
    normalize: bool = False,
    matryoshka: bool = False,
) -> EmbeddingPackage:
    """The folder's sentence graph (sequences up to its max_seq_length) with its weights and tokenizer.
    A sentence-transformers folder (modules.json) says its own pooling and normalisation; a plain encoder folder
    is given them (`pooling` mean, cls or last; `normalize`)."""
    from luminal.nn.models.sentence import SentenceConfig, sentence_graph

    folder = Path(folder)
    try:
        tokenizer_json = read_folder_bytes(folder, TOKENIZER, FORMAT.caps[TOKENIZER]).decode("utf-8")
    except FolderFileError as e:
        raise FileNotFoundError(f"{e}: an embedding model is served with its tokenizer") from None
    except UnicodeDecodeError:
        raise ValueError(f"{TOKENIZER} is not UTF-8") from None
    if (folder / MODULES).exists():
        if pooling is not None or normalize:
            raise ValueError(f"{MODULES} says how this folder pools and normalises; --pooling and --normalize "
                             "are for a Hugging Face encoder folder without it")  # fmt: skip
        sentence = SentenceConfig.from_folder(folder)
    elif pooling is None:
        raise ValueError(f"{folder} has no {MODULES}: say how its token states become one embedding "
                         "(--pooling mean, cls or last)")  # fmt: skip
    else:
        sentence = SentenceConfig(pooling=pooling, normalize=normalize)
    max_seq = _max_seq_length(folder)
    graph = sentence_graph(folder, max_batch=max_batch, max_seq=max_seq, sentence=sentence)
    return EmbeddingPackage(graph, tokenizer_json, max_seq, sentence.normalize, matryoshka)


def is_encoder_folder(folder: Path) -> bool:
    """A folder whose model is an encoder luminal builds: a sentence-transformers folder, or a Hugging Face
    folder whose config.json names a BERT model."""
    if (folder / MODULES).exists():
        return True
    try:
        config = read_folder_json(folder, "config.json")
    except FolderFileError:
        return False
    return isinstance(config, dict) and config.get("model_type") in ENCODER_MODEL_TYPES


def _max_seq_length(folder: Path) -> int:
    """sentence_bert_config.json's max_seq_length; else the tokenizer's model_max_length (what transformers
    truncates to) within the model's positions."""
    limit = _json_field(folder, SENTENCE_CONFIG, "max_seq_length")
    if limit is None:
        positions = _json_field(folder, "config.json", "max_position_embeddings")
        wanted = _json_field(folder, TOKENIZER_CONFIG, "model_max_length")
        # transformers writes a huge sentinel (1e30) when a tokenizer has no limit of its own
        limit = min(wanted, positions) if type(wanted) is int and type(positions) is int else positions
    if type(limit) is not int or limit < 2:
        raise ValueError(f"max_seq_length must be an integer of at least 2, got {limit!r:.40}")
    return limit


def _json_field(folder: Path, name: str, key: str) -> Any:
    """`key` of the folder's JSON object `name`; None where the file is absent."""
    if not (folder / name).exists():
        return None
    config = read_folder_json(folder, name)
    if not isinstance(config, dict):
        raise ValueError(f"{name} must be a JSON object")
    return config.get(key)


def save_package(package: EmbeddingPackage, path: Any) -> None:
    """Write the package atomically."""
    entries = {GRAPH: [graph_to_bytes(package.graph)], TOKENIZER: [package.tokenizer_json.encode()]}
    fields = {"max_seq_length": package.max_seq_length, "dimensions": package.dimensions,
              "normalized": package.normalized, "matryoshka": package.matryoshka}  # fmt: skip
    write_bundle(FORMAT, path, entries, fields)


def is_embedding_package(path: Any) -> bool:
    """Whether the file at `path` says it is an embedding package (only its manifest is read)."""
    return bundle_format_name(path, EmbeddingPackageError) == FORMAT.name


def load_package(source: Any) -> EmbeddingPackage:
    """Read a package (a path or its bytes); any defect raises EmbeddingPackageError (or the `.lgraph` loader's
    GraphFileError) naming it."""
    manifest, raw = read_bundle(FORMAT, source)
    graph = load_graph(raw.pop(GRAPH))
    # Packages from before normalized and matryoshka were written: never cut (False).
    flags = {k: manifest.get(k, False) for k in ("normalized", "matryoshka")}
    package = EmbeddingPackage(graph, _tokenizer_json(raw), manifest.get("max_seq_length"), **flags)
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
    for flag in ("normalized", "matryoshka"):
        if type(getattr(package, flag)) is not bool:
            raise EmbeddingPackageError(f"manifest: {flag} must be true or false")
    if manifest.get("dimensions") != package.dimensions:
        raise EmbeddingPackageError(f"manifest: dimensions disagree with {OUTPUT}'s {package.dimensions}")


__all__ = [
    "FORMAT",
    "EmbeddingPackage",
    "EmbeddingPackageError",
    "build_package",
    "is_embedding_package",
    "is_encoder_folder",
    "load_package",
    "read_tokenizer",
    "save_package",
]
