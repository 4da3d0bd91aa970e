"""Building .lgraph files for the tests, good ones and deliberately broken ones (entries re-zipped, headers
forged, manifests re-hashed)."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import zipfile
import zlib

import ml_dtypes
import numpy as np

import luminal as lm
from luminal.graph_file import graph_to_bytes
from luminal.hl import prim
from luminal.view import idx

GRAPH, MANIFEST, WEIGHTS = "graph.json", "manifest.json", "weights.safetensors"


def rich_graph() -> tuple[lm.Graph, dict[str, np.ndarray]]:
    """Symbolic dims, every kind of view, Iota/Gather/Scatter/Cast/Constant, weights of every dtype."""
    g = lm.Graph()
    b = lm.sym("b", 1, 32)
    x = g.input("x", (b, 6))
    w16 = g.weight("w16", (6,), lm.float16)
    wbf = g.weight("wbf", (2, 3), lm.bfloat16)
    wint = g.weight("wint", (4,), lm.int32)
    mask = g.weight("mask", (6,), lm.bool)
    index = g.weight("index", (3,), lm.int64)
    empty = g.weight("empty", (0, 2))
    scale = g.weight("scale", ())
    view = lambda t, st: t.with_view(st)
    prim.exp2(view(x, x.st.permute([1, 0]))).output("permuted")
    prim.sum_reduce(view(x, x.st.reshape((b, 2, 3))), 2).output("reshaped")
    half = prim.broadcast_to(prim.cast(w16, lm.float32), (b, 6))  # expand
    prim.add(half, view(x, x.st.flip([1]))).output("flipped")
    prim.max_reduce(view(x, x.st.pad([(0, 0), (1, 2)])), 1).output("padded")
    sliced = view(x, x.st.slice([(0, b, 1), (1, 5, 2)]))
    prim.mul(sliced, sliced).output("sliced")
    iota = prim.iota(g, idx(0, b) * 6 + idx(1, 6), (b, 6), lm.int64)
    prim.add(prim.cast(iota, lm.float32), x).output("iota")
    gathered = prim.gather(x, index)
    gathered.output("gathered")
    prim.scatter(x, index, prim.mul(gathered, gathered)).output("scattered")
    prim.cast(wbf, lm.float32).output("bf16")
    prim.mul(prim.broadcast_to(prim.cast(mask, lm.float32), (b, 6)), x).output("masked")
    prim.less_than(prim.fmod(wint, wint), wint).output("ints")
    for k, v in enumerate((float("inf"), float("-inf"), float("nan"), -0.0)):
        prim.add(x, prim.scalar(g, v, lm.float32, (b, 6))).output(f"special{k}")
    g.constant(True).output("true")
    prim.sum_reduce(empty, 0).output("empty")
    prim.mul(x, prim.broadcast_to(scale, (b, 6))).output("scaled")
    g.bind(
        {
            "w16": np.linspace(-2, 2, 6).astype(np.float16),
            "wbf": np.array([[1.5, -2.25, 3e38], [0, -0.0, 7]], np.float32).astype(ml_dtypes.bfloat16),
            "wint": np.array([3, -4, 5, 2**31 - 1], np.int32),
            "mask": np.array([True, False, True, True, False, False]),
            "index": np.array([0, 5, 3], np.int64),
            "empty": np.zeros((0, 2), np.float32),
            "scale": np.array(-3.5, np.float32),
        }
    )
    return g, {"x": np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)}


def small_graph() -> lm.Graph:
    """%0 Input x (b, 4), %1 Weight w (4,), %2 Mul(x, w expanded), %3 SumReduce(axis=1), %4 Output y."""
    g = lm.Graph()
    x = g.input("x", (lm.sym("b", 1, 8), 4))
    w = g.weight("w", (4,))
    prim.sum_reduce(prim.mul(x, prim.broadcast_to(w, x.shape)), 1).output("y")
    return g.bind({"w": np.arange(4, dtype=np.float32)})


def entries(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def pack(parts: dict[str, bytes], rehash: bool = True) -> bytes:
    """Zip `parts`; with `rehash`, the manifest's sizes and digests are updated to match the entries."""
    if rehash and MANIFEST in parts:
        manifest = json.loads(parts[MANIFEST])
        for name in (GRAPH, WEIGHTS):
            if name in parts:
                manifest["entries"][name] = {
                    "sha256": hashlib.sha256(parts[name]).hexdigest(),
                    "size": len(parts[name]),
                }
        parts = {**parts, MANIFEST: json.dumps(manifest).encode()}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in parts.items():
            zf.writestr(name, data)
    return buf.getvalue()


def edit(part: str, fn, g: lm.Graph | None = None) -> bytes:
    """A file from `g` (default: small_graph) whose JSON entry `part` went through `fn` (in place)."""
    parts = entries(graph_to_bytes(g or small_graph()))
    doc = json.loads(parts[part])
    fn(doc)
    return pack({**parts, part: json.dumps(doc).encode()})


def safetensors_bytes(header: dict, data: bytes, header_len: int | None = None) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text) if header_len is None else header_len) + text + data


def with_weights(blob: bytes) -> bytes:
    return pack({**entries(graph_to_bytes(small_graph())), WEIGHTS: blob})


def raw_zip(name: str, stream: bytes, crc: int, size: int) -> bytes:
    """One deflated entry whose headers declare `size` bytes: what zipfile would never write for us."""
    n = name.encode()
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0x21, crc, len(stream), size, len(n), 0)
    central = struct.pack(
        "<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 8, 0, 0x21, crc, len(stream), size, len(n), 0, 0, 0, 0, 0, 0
    )
    end = struct.pack(
        "<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(central) + len(n), len(local) + len(n) + len(stream), 0
    )
    return local + n + stream + central + n + end


def zero_stream(size: int) -> tuple[bytes, int]:
    """A deflate stream of `size` zero bytes, made from one fully-flushed 1 MiB piece repeated (cheap to build)."""
    chunk = bytes(2**20)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(size // len(chunk)):
        crc = zlib.crc32(chunk, crc)
    return piece * (size // len(chunk)) + b"\x03\x00", crc  # 03 00: an empty final block
