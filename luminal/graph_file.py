"""The `.lgraph` file: one zip holding exactly manifest.json, graph.json and weights.safetensors.

manifest.json: format name and version, the luminal version, the input/output signature (symbolic dims as
their JSON form), symbol ranges, the sha256 and size of the other two entries, node and weight counts.
graph.json: the nodes (see `luminal.graph_json`). weights.safetensors: the bound weights, standard layout.

Writing is atomic (a temporary file renamed into place) and deterministic (fixed zip timestamps and
attributes, sorted JSON keys). Reading treats the file as hostile: every size is capped before and while
reading, nothing is unpickled, evaluated or imported, and every defect raises `GraphFileError`.
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
import zipfile
from typing import IO, Any

import numpy as np

from luminal import dtypes as dt
from luminal.graph import MAX_NAME_CHARS, Graph, GraphError
from luminal.graph_json import (
    GraphFileError,
    decode_graph,
    dump_json,
    encode_graph,
    expect_keys,
    parse_json,
    signature,
    symbol_table,
)
from luminal.padding import PaddingError, apply_manifest_padding
from luminal.safezip import end_record, entry_info, read_entry, write_atomic
from luminal.symbolic import MAX_SYMBOL_CHARS
from luminal.view import format_shape

FORMAT_NAME = "luminal.lgraph"
FORMAT_VERSION = 1
MANIFEST, GRAPH, WEIGHTS = "manifest.json", "graph.json", "weights.safetensors"
MANIFEST_KEYS = {"format", "format_version", "luminal_version", "signature", "symbols", "entries", "counts"}

KiB, MiB, GiB = 2**10, 2**20, 2**30
# luminal_version is stored with the model and shown back: a PEP 440 version with a local part fits easily.
MAX_VERSION_CHARS = 64
# Per-entry caps on the uncompressed size. The manifest is a signature of a few hundred tensors; graph.json
# holds up to MAX_NODES nodes at ~200 bytes each; the weights of a ~30B-parameter bfloat16 model fit.
ENTRY_CAPS = {MANIFEST: 1 * MiB, GRAPH: 256 * MiB, WEIGHTS: 64 * GiB}
MAX_TOTAL_BYTES = sum(ENTRY_CAPS.values())
MAX_FILE_BYTES = MAX_TOTAL_BYTES + 1 * MiB  # the entries plus zip headers: anything larger is not ours
# Deflate tops out near 1030:1 on runs of zeros; real JSON compresses < 50:1 and we store weights
# uncompressed. Small entries cannot be bombs, so the ratio is checked only above RATIO_FLOOR.
MAX_RATIO = 200
RATIO_FLOOR = 1 * MiB
# Three entries need ~200 bytes of central directory: tight caps keep zipfile from parsing a huge directory.
MAX_DIRECTORY_ENTRIES = 16
MAX_DIRECTORY_BYTES = 64 * KiB
# A safetensors header is ~100 bytes per tensor: 16 MiB is ~10^5 tensors (the library allows 100 MB).
MAX_SAFETENSORS_HEADER = 16 * MiB

_ST_NAMES = {
    dt.float32: "F32",
    dt.float64: "F64",
    dt.float16: "F16",
    dt.bfloat16: "BF16",
    dt.int8: "I8",
    dt.int16: "I16",
    dt.int32: "I32",
    dt.int64: "I64",
    dt.uint8: "U8",
    dt.uint16: "U16",
    dt.uint32: "U32",
    dt.uint64: "U64",
    dt.bool_: "BOOL",
}
_ST_DTYPES = {v: k for k, v in _ST_NAMES.items()}


# ---- writing -------------------------------------------------------------------------------------------


def save_graph(graph: Graph, path: Any) -> None:
    """Write `graph` to `path` atomically: on any error no file (and no half-written one) is left."""
    write_atomic(path, lambda f: write_graph(graph, f), ".lgraph-")


def graph_to_bytes(graph: Graph) -> bytes:
    """The `.lgraph` file's bytes (the same, byte for byte, for the same graph and weights)."""
    buf = io.BytesIO()
    write_graph(graph, buf)
    return buf.getvalue()


def structure_digest(graph: Graph) -> Any:
    """A sha256 (hashlib object, open for more) of `graph`'s structure alone: what its `.lgraph` holds but the
    weights' bytes."""
    return hashlib.sha256(dump_json(encode_graph(graph, check=False)))


def graph_fingerprint(graph: Graph) -> str:
    """sha256 of what a `.lgraph` of `graph` holds (its structure and every weight's bytes), without building the
    file: the compile cache's key for a graph (a third of the time of hashing the file's bytes)."""
    digest = structure_digest(graph)
    for part in _safetensors_parts(graph):
        digest.update(part)
    return digest.hexdigest()


def write_graph(graph: Graph, f: IO[bytes]) -> None:
    from luminal import __version__  # here, not at the top: luminal/__init__ may import this module early

    unbound = graph.unbound_weights()
    if unbound:
        raise GraphError(f"cannot save: weight(s) {unbound[:8]} are not bound; call graph.bind(...) first")
    graph_json = dump_json(encode_graph(graph))
    weight_parts = _safetensors_parts(graph)
    weights_hash = hashlib.sha256()
    for part in weight_parts:
        weights_hash.update(part)
    entries = {
        GRAPH: {"sha256": hashlib.sha256(graph_json).hexdigest(), "size": len(graph_json)},
        WEIGHTS: {"sha256": weights_hash.hexdigest(), "size": sum(len(memoryview(p)) for p in weight_parts)},
    }
    manifest = dump_json(
        {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "luminal_version": __version__,
            "signature": signature(graph),
            "symbols": symbol_table(graph),
            "entries": entries,
            "counts": {"nodes": len(graph.nodes), "weights": len(graph.weights)},
        }
    )
    with zipfile.ZipFile(f, "w") as zf:
        _put(zf, MANIFEST, [manifest], zipfile.ZIP_DEFLATED)
        _put(zf, GRAPH, [graph_json], zipfile.ZIP_DEFLATED)
        _put(zf, WEIGHTS, weight_parts, zipfile.ZIP_STORED)  # weights barely compress; stored can be mapped


def _put(zf: zipfile.ZipFile, name: str, parts: list, method: int) -> None:
    info = entry_info(name, method)
    info.file_size = sum(len(memoryview(p)) for p in parts)  # lets zipfile pick zip64 only when needed
    with zf.open(info, "w") as out:
        for part in parts:
            out.write(part)


def _safetensors_parts(graph: Graph) -> list:
    """Header then each tensor's raw bytes (views, not copies). Widest dtypes first keeps every tensor aligned."""
    names = sorted(graph.weights, key=lambda n: (-graph.nodes[graph.weights[n]].dtype.itemsize, n))
    header: dict[str, Any] = {}
    parts: list = []
    offset = 0
    for name in names:
        node = graph.nodes[graph.weights[name]]
        if node.dtype not in _ST_NAMES:  # safetensors has no 4- or 2-bit integer types
            raise GraphFileError(
                f"weight {name!r} is {node.dtype.name}, which a graph file cannot store; "
                "store it as int8 or uint8 and cast it in the graph"
            )
        raw = np.asarray(graph.weight_data[name], order="C").reshape(-1).view(np.uint8)
        header[name] = {
            "dtype": _ST_NAMES[node.dtype],
            "shape": list(node.shape),  # the declared shape: a bound 0-d array may have become 1-d
            "data_offsets": [offset, offset + raw.size],
        }
        offset += raw.size
        parts.append(raw)
    text = dump_json(header)
    text += b" " * (-(8 + len(text)) % 8)  # pad so the data starts 8-byte aligned, as the format suggests
    return [struct.pack("<Q", len(text)) + text, *parts]


# ---- reading -------------------------------------------------------------------------------------------


def load_graph(source: Any) -> Graph:
    """Read a `.lgraph` file (a path, or its bytes). Any defect raises GraphFileError naming it."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        return _load(io.BytesIO(data), len(data))
    with open(os.fspath(source), "rb") as f:
        return _load(f, os.fstat(f.fileno()).st_size)


def _load(f: IO[bytes], size: int) -> Graph:
    if size > MAX_FILE_BYTES:
        raise GraphFileError(f"the file is {size} bytes, over the limit of {MAX_FILE_BYTES}")
    _check_end_record(f, size)
    try:
        zf = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError, struct.error) as e:
        raise GraphFileError(f"corrupt zip archive: {e}") from None
    with zf:
        infos = _check_entries(zf, size)
        if MANIFEST not in infos:
            raise GraphFileError(f"missing entry {MANIFEST}")
        manifest = parse_json(_read_entry(zf, infos[MANIFEST]), MANIFEST)
        _check_format(manifest)
        if set(infos) != {MANIFEST, GRAPH, WEIGHTS}:
            missing, extra = sorted({GRAPH, WEIGHTS} - set(infos)), sorted(set(infos) - {MANIFEST, GRAPH, WEIGHTS})
            raise GraphFileError(
                f"the archive must hold exactly {MANIFEST}, {GRAPH}, {WEIGHTS}: "
                f"missing entries {missing}, unexpected entries {extra}"
            )
        graph_bytes = _read_entry(zf, infos[GRAPH])
        weight_bytes = _read_entry(zf, infos[WEIGHTS])
    for name, data in ((GRAPH, graph_bytes), (WEIGHTS, weight_bytes)):
        _check_digest(manifest, name, data)
    graph = decode_graph(parse_json(graph_bytes, GRAPH))
    _bind(graph, read_safetensors(weight_bytes))
    try:  # padding lives in the manifest's signature only (graph.json holds ops): declare it, then compare
        apply_manifest_padding(graph, manifest["signature"])
    except PaddingError as e:
        raise GraphFileError(f"{MANIFEST}: bad padding declaration: {e}") from None
    _check_manifest(manifest, graph)
    return graph


def _check_end_record(f: IO[bytes], size: int) -> None:
    count, directory_size = end_record(f, size, GraphFileError)
    if count > MAX_DIRECTORY_ENTRIES or directory_size > MAX_DIRECTORY_BYTES:
        raise GraphFileError(f"the archive lists {count} entries in {directory_size} bytes; a graph file has 3")


def _check_entries(zf: zipfile.ZipFile, size: int) -> dict[str, zipfile.ZipInfo]:
    infos: dict[str, zipfile.ZipInfo] = {}
    total = 0
    for info in zf.infolist():
        name = info.filename
        if name.startswith("/") or "\\" in name or ".." in name.split("/") or ":" in name or "\0" in name:
            raise GraphFileError(f"unsafe entry name {name!r:.80} (absolute, parent or drive path)")
        if name in infos:
            raise GraphFileError(f"duplicate entry {name!r:.80}")
        if info.flag_bits & 0x1:
            raise GraphFileError(f"entry {name!r:.80} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise GraphFileError(f"entry {name!r:.80} uses unsupported compression method {info.compress_type}")
        if name in ENTRY_CAPS and info.file_size > ENTRY_CAPS[name]:
            raise GraphFileError(f"entry {name} declares {info.file_size} bytes, over the cap of {ENTRY_CAPS[name]}")
        if info.header_offset + info.compress_size > size:
            raise GraphFileError(f"entry {name!r:.80} extends past the end of the file (truncated?)")
        if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
            raise GraphFileError(f"stored entry {name!r:.80} declares two different sizes")
        if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise GraphFileError(
                f"entry {name!r:.80} would inflate {info.compress_size} bytes to {info.file_size} "
                f"(compression ratio over {MAX_RATIO}:1): a compression bomb"
            )
        total += info.file_size
        infos[name] = info
    if total > MAX_TOTAL_BYTES:
        raise GraphFileError(f"the entries declare {total} bytes in all, over the limit of {MAX_TOTAL_BYTES}")
    return infos


def _read_entry(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytearray:
    return read_entry(zf, info, ENTRY_CAPS[info.filename], GraphFileError)


def _check_format(manifest: Any) -> None:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        shown = manifest.get("format") if isinstance(manifest, dict) else manifest
        raise GraphFileError(f"not a luminal graph file: {MANIFEST} names format {shown!r:.60}, not {FORMAT_NAME!r}")
    version = manifest.get("format_version")
    if type(version) is not int or version != FORMAT_VERSION:
        raise GraphFileError(f"unsupported format version {version!r:.40}; this luminal reads {FORMAT_VERSION}")
    expect_keys(manifest, MANIFEST_KEYS, MANIFEST)
    if not isinstance(manifest["luminal_version"], str):
        raise GraphFileError(f"{MANIFEST}: luminal_version must be a string")
    _check_lengths(manifest)
    entries = expect_keys(manifest["entries"], {GRAPH, WEIGHTS}, f"{MANIFEST} entries")
    for name, entry in entries.items():
        expect_keys(entry, {"sha256", "size"}, f"{MANIFEST} entry {name}")


def _too_long(field: str, value: Any, limit: int) -> None:
    if isinstance(value, str) and len(value) > limit:
        raise GraphFileError(f"{MANIFEST}: {field} is {len(value)} characters, over the limit of {limit}")


def _check_lengths(manifest: dict[str, Any]) -> None:
    """Every string the manifest carries is bounded, checked before anything else reads it (the graph refuses
    long names later too, but this names the field and its limit at once). Malformed tables are left to the
    checks that compare the manifest with graph.json."""
    _too_long("luminal_version", manifest["luminal_version"], MAX_VERSION_CHARS)
    sig = manifest["signature"]
    for side in ("inputs", "outputs"):
        entries = sig.get(side) if isinstance(sig, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict):
                _too_long(f"{side[:-1]} name", entry.get("name"), MAX_NAME_CHARS)
    symbols = manifest["symbols"]
    for name in symbols if isinstance(symbols, dict) else []:
        _too_long("symbol name", name, MAX_SYMBOL_CHARS)


def _check_digest(manifest: dict[str, Any], name: str, data: bytearray) -> None:
    entry = manifest["entries"][name]
    if entry["size"] != len(data):
        raise GraphFileError(f"{name} holds {len(data)} bytes but the manifest says {entry['size']!r:.40}")
    digest = hashlib.sha256(data).hexdigest()
    if entry["sha256"] != digest:
        raise GraphFileError(f"sha256 mismatch: {name} hashes to {digest}, the manifest says {entry['sha256']!r:.80}")


def _check_manifest(manifest: dict[str, Any], graph: Graph) -> None:
    """The manifest's summary must describe the graph that graph.json actually holds."""
    if manifest["signature"] != signature(graph):
        raise GraphFileError(
            f"the manifest signature {manifest['signature']!r:.300} disagrees with graph.json {signature(graph)!r:.300}"
        )
    if manifest["symbols"] != symbol_table(graph):
        raise GraphFileError(
            f"symbol range conflict: the manifest declares {manifest['symbols']!r:.200}, "
            f"graph.json {symbol_table(graph)!r:.200}"
        )
    counts = {"nodes": len(graph.nodes), "weights": len(graph.weights)}
    if manifest["counts"] != counts:
        raise GraphFileError(f"the manifest counts {manifest['counts']!r:.80} disagree with graph.json {counts}")


def read_safetensors(blob: bytearray) -> dict[str, np.ndarray]:
    """Parse safetensors bytes without trusting them: header size and offsets are checked against the data.

    The arrays are writable views into `blob` (no copy). bfloat16 is read here because safetensors.numpy
    cannot load it.
    """
    if len(blob) < 8:
        raise GraphFileError(f"{WEIGHTS} is {len(blob)} bytes, too short for a header")
    (header_len,) = struct.unpack_from("<Q", blob)
    if header_len > MAX_SAFETENSORS_HEADER:
        raise GraphFileError(f"{WEIGHTS} header is {header_len} bytes, over the limit of {MAX_SAFETENSORS_HEADER}")
    if 8 + header_len > len(blob):
        raise GraphFileError(f"{WEIGHTS} header claims {header_len} bytes but the entry holds {len(blob)}")
    header = parse_json(bytes(blob[8 : 8 + header_len]), f"{WEIGHTS} header")
    if not isinstance(header, dict):
        raise GraphFileError(f"{WEIGHTS} header must be a JSON object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise GraphFileError(f"{WEIGHTS} __metadata__ must map strings to strings")
    start, data_len = 8 + header_len, len(blob) - 8 - header_len
    spans, arrays = [], {}
    for name, entry in header.items():
        where = f"{WEIGHTS} tensor {name!r:.80}"
        expect_keys(entry, {"dtype", "shape", "data_offsets"}, where)
        dtype = _ST_DTYPES.get(entry["dtype"]) if isinstance(entry["dtype"], str) else None
        shape, offsets = entry["shape"], entry["data_offsets"]
        if dtype is None:
            raise GraphFileError(f"{where}: unsupported dtype {entry['dtype']!r:.20}")
        if not isinstance(shape, list) or len(shape) > 64 or any(type(d) is not int or d < 0 for d in shape):
            raise GraphFileError(f"{where}: malformed shape {shape!r:.80}")
        if not isinstance(offsets, list) or len(offsets) != 2 or any(type(o) is not int for o in offsets):
            raise GraphFileError(f"{where}: malformed data_offsets {offsets!r:.80}")
        begin, end = offsets
        count = int(np.prod(shape, dtype=object)) if shape else 1
        if not 0 <= begin <= end <= data_len:
            raise GraphFileError(f"{where}: data_offsets {offsets} lie outside the {data_len}-byte data buffer")
        if end - begin != count * dtype.itemsize:
            raise GraphFileError(
                f"{where}: data_offsets span {end - begin} bytes but {dtype.name}{format_shape(shape)} "
                f"needs {count * dtype.itemsize}"
            )
        spans.append((begin, end, name))
        arr = np.frombuffer(blob, dtype.np, count, start + begin) if count else np.zeros(0, dtype.np)
        if dtype == dt.bool_ and count and np.frombuffer(blob, np.uint8, count, start + begin).max() > 1:
            raise GraphFileError(f"{where}: bool data holds bytes other than 0 and 1")
        arrays[name] = arr.reshape(shape)
    position = 0
    for begin, end, name in sorted(spans):  # the spec: tensors tile the buffer, no holes, no overlaps
        if begin != position:
            raise GraphFileError(f"{WEIGHTS}: tensor {name!r:.80} starts at {begin}, expected {position}")
        position = end
    if position != data_len:
        raise GraphFileError(f"{WEIGHTS}: {data_len - position} bytes after the last tensor")
    return arrays


def _bind(graph: Graph, arrays: dict[str, np.ndarray]) -> None:
    missing = sorted(set(graph.weights) - set(arrays))
    extra = sorted(set(arrays) - set(graph.weights))
    if missing or extra:
        raise GraphFileError(
            f"{WEIGHTS} does not match the graph: missing weights {missing!r:.300}, extra weights {extra!r:.300}"
        )
    for name, arr in arrays.items():
        node = graph.nodes[graph.weights[name]]
        if tuple(arr.shape) != tuple(node.shape) or arr.dtype != node.dtype.np:
            raise GraphFileError(
                f"weight {name!r}: {WEIGHTS} holds {dt.dtype_of(arr.dtype).name}{format_shape(arr.shape)}, "
                f"the graph declares {node.dtype.name}{format_shape(node.shape)}"
            )
    graph.bind(arrays)


__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "GraphFileError", "graph_to_bytes", "load_graph", "save_graph"]
