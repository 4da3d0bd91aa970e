"""The .lgraph file: exact round trips, deterministic atomic writes, and rejection of hostile files."""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import tracemalloc
import zipfile
import zlib

import ml_dtypes
import numpy as np
import pytest
import safetensors.torch

import luminal as lm
from luminal import graph_file, graph_json
from luminal.graph_file import GraphFileError, graph_to_bytes, load_graph
from luminal.hl import prim
from luminal.symbolic import var
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


# ---- round trip -----------------------------------------------------------------------------------------


def test_round_trip_is_exact(tmp_path):
    g, feed = rich_graph()
    path = tmp_path / "model.lgraph"
    lm.save(g, path)
    g2 = lm.load(path)
    assert len(g2.nodes) == len(g.nodes)
    for a, b in zip(g.nodes, g2.nodes):
        assert (a.op.name, a.op.params(), a.shape, a.dtype) == (b.op.name, b.op.params(), b.shape, b.dtype)
        assert [s for s, _ in a.inputs] == [s for s, _ in b.inputs]
        for (_, va), (_, vb) in zip(a.inputs, b.inputs):
            assert (va.base, va.shape, va.index, va.valid) == (vb.base, vb.shape, vb.index, vb.valid)
    assert (g.inputs, g.weights, g.outputs) == (g2.inputs, g2.weights, g2.outputs)
    assert list(g.inputs) == list(g2.inputs) and list(g.outputs) == list(g2.outputs)
    assert {n: (e.lo, e.hi) for n, e in g2.symbols.items()} == {"b": (1, 32)}
    for name, arr in g.weight_data.items():
        got = g2.weight_data[name]
        assert got.dtype == arr.dtype and got.shape == arr.shape and got.tobytes() == arr.tobytes()
    assert g2.nodes[g2.weights["scale"]].shape == ()
    want, got = lm.run(g, feed), lm.run(g2, feed)
    assert set(got) == set(want)
    for name in want:
        assert got[name].dtype == want[name].dtype
        np.testing.assert_array_equal(got[name], want[name])  # NaNs in the same places
    assert np.isnan(got["special2"]).all() and np.isposinf(got["special0"]).all()


def test_manifest_signature_and_weights_interoperate():
    g, _ = rich_graph()
    parts = entries(graph_to_bytes(g))
    assert sorted(parts) == [GRAPH, MANIFEST, WEIGHTS]
    manifest = json.loads(parts[MANIFEST])
    assert manifest["format"] == "luminal.lgraph" and manifest["format_version"] == 1
    assert manifest["luminal_version"] == lm.__version__
    assert manifest["signature"]["inputs"] == [{"name": "x", "shape": [["var", "b", 1, 32], 6], "dtype": "float32"}]
    assert {"name": "ints", "shape": [4], "dtype": "bool"} in manifest["signature"]["outputs"]
    assert manifest["symbols"] == {"b": {"min": 1, "max": 32}}
    assert manifest["counts"] == {"nodes": len(g.nodes), "weights": 7}
    # the weights are standard safetensors: the reference library reads them, bfloat16 included
    for name, tensor in safetensors.torch.load(parts[WEIGHTS]).items():
        assert tuple(tensor.shape) == g.nodes[g.weights[name]].shape  # the declared shape, 0-d included
        assert tensor.float().numpy().ravel().tolist() == g.weight_data[name].astype(np.float32).ravel().tolist()


def test_writes_are_deterministic_and_atomic(tmp_path, monkeypatch):
    g, _ = rich_graph()
    first = graph_to_bytes(g)
    assert graph_to_bytes(rich_graph()[0]) == first
    assert graph_to_bytes(load_graph(first)) == first
    path = tmp_path / "m.lgraph"
    lm.save(small_graph(), path)
    before = path.read_bytes()

    real_put = graph_file._put

    def explode(zf, name, parts, method):  # fails after the manifest and graph entries are written
        if name == WEIGHTS:
            raise OSError("disk full")
        real_put(zf, name, parts, method)

    monkeypatch.setattr(graph_file, "_put", explode)
    with pytest.raises(OSError, match="disk full"):
        lm.save(g, path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["m.lgraph"]  # old file intact, no temp left


def test_save_requires_bound_weights(tmp_path):
    g = lm.Graph()
    g.weight("w", (2,)).output("y")
    with pytest.raises(lm.GraphError, match=r"not bound.*\['w'\]|\['w'\].*not bound"):
        lm.save(g, tmp_path / "m.lgraph")
    assert os.listdir(tmp_path) == []


def test_save_refuses_what_it_could_not_read_back():
    g = lm.Graph()
    x = g.input("x", (2, 3))
    st = x.st.permute([1, 0])
    prim.exp2(x.with_view(lm.ShapeTracker(st.base, st.shape, st.index, st.valid, ()))).output("y")  # no history
    with pytest.raises(lm.GraphError, match="which no movement ops built"):
        graph_to_bytes(g)
    g = lm.Graph()
    prim.iota(g, var("_i0", 0, 99), (4,)).output("i")  # the index of a 4-long axis declared up to 99
    with pytest.raises(lm.GraphError, match=r"could not be read back: .*index variable _i0 in \[0, 99\]"):
        graph_to_bytes(g)


# ---- the container --------------------------------------------------------------------------------------


def test_not_a_zip_or_truncated():
    with pytest.raises(GraphFileError, match="not a zip archive"):
        load_graph(b'{"format": "luminal.lgraph"}')
    good = graph_to_bytes(small_graph())
    with pytest.raises(GraphFileError, match="truncated"):
        load_graph(good[: len(good) // 2])


@pytest.mark.parametrize("name", ["../evil.json", "/etc/passwd", "dir\\graph.json", "C:graph.json"])
def test_path_tricks(name):
    with pytest.raises(GraphFileError, match="unsafe entry name"):
        load_graph(pack({**entries(graph_to_bytes(small_graph())), name: b"x"}))


def test_missing_unexpected_and_duplicate_entries():
    parts = entries(graph_to_bytes(small_graph()))
    with pytest.raises(GraphFileError, match=r"missing entries \['weights.safetensors'\]"):
        load_graph(pack({k: v for k, v in parts.items() if k != WEIGHTS}))
    with pytest.raises(GraphFileError, match=r"unexpected entries \['notes.txt'\]"):
        load_graph(pack({**parts, "notes.txt": b"hi"}))
    with pytest.raises(GraphFileError, match="missing entry manifest.json"):
        load_graph(pack({k: v for k, v in parts.items() if k != MANIFEST}))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf, pytest.warns(UserWarning, match="Duplicate"):
        for name, data in [*parts.items(), (GRAPH, parts[GRAPH])]:
            zf.writestr(name, data)
    with pytest.raises(GraphFileError, match="duplicate entry 'graph.json'"):
        load_graph(buf.getvalue())


def test_encrypted_entry():
    data = bytearray(graph_to_bytes(small_graph()))
    count, _, at = struct.unpack_from("<H2L", data, len(data) - 12)  # end record: entries, size, offset
    for _ in range(count):  # set the "encrypted" flag bit in each central and local header
        name_len, extra_len, comment_len = struct.unpack_from("<3H", data, at + 28)
        (local,) = struct.unpack_from("<L", data, at + 42)
        data[at + 8] |= 1
        data[local + 6] |= 1
        at += 46 + name_len + extra_len + comment_len
    with pytest.raises(GraphFileError, match="'manifest.json' is encrypted"):
        load_graph(bytes(data))


def test_size_caps(monkeypatch):
    data = graph_to_bytes(small_graph())
    for name in (GRAPH, WEIGHTS):
        with monkeypatch.context() as patch:
            patch.setitem(graph_file.ENTRY_CAPS, name, 10)
            with pytest.raises(GraphFileError, match=rf"{name} declares \d+ bytes, over the cap of 10"):
                load_graph(data)
    monkeypatch.setattr(graph_file, "MAX_FILE_BYTES", 100)
    with pytest.raises(GraphFileError, match=r"\d+ bytes, over the limit of 100"):
        load_graph(data)


def test_compression_bomb_is_refused_unread():
    stream, crc = zero_stream(2**31)  # 2 GiB of zeros in ~2 MB
    tracemalloc.start()
    with pytest.raises(GraphFileError, match="compression bomb"):
        load_graph(raw_zip(WEIGHTS, stream, crc, 2**31))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 * 2**20


def test_entry_inflating_past_its_declared_size_is_cut_off():
    stream, crc = zero_stream(64 * 2**20)
    tracemalloc.start()
    with pytest.raises(GraphFileError, match="manifest.json is corrupt"):  # read stops at 100 bytes: bad CRC
        load_graph(raw_zip(MANIFEST, stream, crc, 100))
    assert tracemalloc.get_traced_memory()[1] < 8 * 2**20
    tracemalloc.stop()
    with pytest.raises(GraphFileError, match="manifest.json is corrupt"):  # not a deflate stream at all
        load_graph(raw_zip(MANIFEST, b"\xff" * 64, 0, 100))


# ---- the JSON entries -----------------------------------------------------------------------------------


def test_json_defects():
    parts = entries(graph_to_bytes(small_graph()))
    cases = [
        (MANIFEST, b"\xff\xfe{}", "not UTF-8"),
        (GRAPH, b'{"nodes": [', "not valid JSON"),
        (GRAPH, b"[" * 5000 + b"]" * 5000, "nests JSON 5000 levels deep"),
        (GRAPH, b'{"nodes": NaN}', "non-standard JSON constant NaN"),
        (GRAPH, b'{"nodes": [], "nodes": []}', "duplicate key 'nodes'"),
    ]
    for name, data, message in cases:
        with pytest.raises(GraphFileError, match=message):
            load_graph(pack({**parts, name: data}, rehash=name != MANIFEST))


def test_manifest_defects():
    def setter(key, value):
        return lambda m: m.__setitem__(key, value)

    cases = [
        (setter("format", "onnx"), "not a luminal graph file"),
        (setter("format_version", 2), "unsupported format version 2"),
        (lambda m: m["signature"]["inputs"][0].__setitem__("dtype", "float16"), "manifest signature"),
        (setter("symbols", {"b": {"min": 1, "max": 9}}), "symbol range conflict"),
        (setter("counts", {"nodes": 4, "weights": 1}), "counts"),
        (lambda m: m.pop("counts"), r"missing \['counts'\]"),
    ]
    for fn, message in cases:
        with pytest.raises(GraphFileError, match=message):
            load_graph(edit(MANIFEST, fn))


def test_digest_mismatch():
    parts = entries(graph_to_bytes(small_graph()))
    tampered = parts[GRAPH].replace(b'"label":"y"', b'"label":"z"')
    with pytest.raises(GraphFileError, match="sha256 mismatch: graph.json"):
        load_graph(pack({**parts, GRAPH: tampered}, rehash=False))


def node(i, key, value):
    return lambda d: d["nodes"][i].__setitem__(key, value)


@pytest.mark.parametrize(
    "fn, message",
    [
        (node(2, "op", "Exec"), "node 2: unknown op 'Exec'"),
        (lambda d: d["nodes"][2]["inputs"][0].__setitem__(0, 99), "node 2: dangling edge to node 99"),
        (lambda d: d["nodes"][2]["inputs"][0].__setitem__(0, 2), r"cycle in the graph: %2 reads %2"),
        (
            lambda d: (d["nodes"].append({**d["nodes"][1], "id": 5}), d["nodes"][2]["inputs"][0].__setitem__(0, 5)),
            "node 2 reads node 5, which comes later",
        ),
        (lambda d: d["nodes"][1]["params"].__setitem__("shape", [["var", "b", 1, 8]]), "must be concrete"),
        (
            lambda d: d["nodes"][1].__setitem__("inputs", [[3, {"base": [], "ops": []}]]),
            "%1 reads %3 reads %2 reads %1",
        ),
        (lambda d: d["nodes"][3]["inputs"].append(d["nodes"][3]["inputs"][0]), "wrong arity: takes 1 inputs, got 2"),
        (lambda d: d["nodes"][3]["params"].__setitem__("axis", "1"), "axis must be an int"),
        (lambda d: d["nodes"][3]["params"].__setitem__("axis", 5), "axis 5 is out of range"),
        (lambda d: d["nodes"][3]["params"].__setitem__("extra", 1), r"unexpected \['extra'\]"),
        (lambda d: d["nodes"][1]["params"].__setitem__("dtype", "float64"), "unknown dtype 'float64'"),
        (node(3, "dtype", "complex"), "node 3 .*unknown dtype"),
        (lambda d: d["nodes"][2]["inputs"][1][1]["ops"].insert(0, ["permute", [0, 0]]), "not a permutation"),
        (lambda d: d["nodes"][2]["inputs"][1][1]["ops"].insert(0, ["explode", []]), "unknown movement op"),
        (
            lambda d: d["nodes"][2]["inputs"][1].__setitem__(1, {"base": [5], "ops": []}),
            r"view over \(5,\) applied to %1",
        ),
        (node(3, "shape", [3]), r"shape lie: graph.json records \(3,\)"),
        (node(3, "dtype", "float16"), "dtype lie: graph.json records float16"),
        (node(0, "shape", [["var", "b", 1, 9], 4]), "symbol range conflict: 'b'"),
        (lambda d: d["nodes"][0]["params"].__setitem__("shape", [["var", "b;system()", 1, 8], 4]), "bad symbol"),
        (
            lambda d: d["nodes"][2]["inputs"][0][1]["ops"].append(["slice", [[["var", "_i0", 0, 0], 2, 1], [0, 4, 1]]]),
            "bad symbol '_i0'",
        ),
        (lambda d: d["nodes"][0]["params"].__setitem__("label", 7), "label must be a string"),
        (lambda d: d["outputs"].__setitem__("y", 3), "the outputs table"),
        (lambda d: d.__setitem__("symbols", {}), "symbol range conflict"),
        (lambda d: d["nodes"][1].__setitem__("id", 7), "node 1 has id 7"),
    ],
)
def test_graph_defects(fn, message):
    with pytest.raises(GraphFileError, match=message):
        load_graph(edit(GRAPH, fn))


def test_too_many_nodes(monkeypatch):
    monkeypatch.setattr(graph_json, "MAX_NODES", 4)
    with pytest.raises(GraphFileError, match="5 nodes, over the limit of 4"):
        load_graph(graph_to_bytes(small_graph()))


@pytest.mark.parametrize(
    "value, dtype, message",
    [
        ("inf", "int32", "not a valid int32"),
        (1e999, "float32", "not a valid float32"),
        (1, "bool", "not a valid bool"),
        ("Infinity", "float32", "not a valid float32"),
        (2**70, "int64", "not a valid int64"),
    ],
)
def test_bad_constants(value, dtype, message):
    g = lm.Graph()
    g.constant(1.0).output("c")
    data = edit(GRAPH, node(0, "params", {"value": "HUGE" if value == 1e999 else value, "dtype": dtype}), g)
    if value == 1e999:  # json.dumps would write Infinity; a plain overflowing number parses as inf
        parts = entries(data)
        data = pack({**parts, GRAPH: parts[GRAPH].replace(b'"HUGE"', b"1e999")})
    with pytest.raises(GraphFileError, match=message):
        load_graph(data)


def test_iota_index_range_must_match_its_shape():
    g = lm.Graph()
    prim.iota(g, idx(0, 4) * 2, (4,)).output("i")
    with pytest.raises(GraphFileError, match=r"index variable _i0 in \[0, 99\]"):
        load_graph(
            edit(GRAPH, lambda d: d["nodes"][0]["params"].__setitem__("expr", ["mul", 2, ["var", "_i0", 0, 99]]), g)
        )


# ---- the weights ---------------------------------------------------------------------------------------


def test_weight_defects():
    four = np.arange(4, dtype=np.float32).tobytes()
    entry = {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}
    cases = [
        ({"v": entry}, four, r"missing weights \['w'\], extra weights \['v'\]"),
        ({"w": entry, "v": {**entry, "data_offsets": [16, 32]}}, four * 2, r"extra weights \['v'\]"),
        ({"w": {**entry, "shape": [2, 2]}}, four, r"holds float32\(2, 2\), the graph declares float32\(4,\)"),
        ({"w": {**entry, "dtype": "I32"}}, four, "holds int32"),
        ({"w": {**entry, "dtype": "F64"}}, four, "unsupported dtype 'F64'"),
        ({"w": {**entry, "data_offsets": [0, 64]}}, four, "lie outside the 16-byte data buffer"),
        ({"w": {**entry, "data_offsets": [0, 12]}}, four[:12], "span 12 bytes but float32"),
        ({"w": entry}, four + b"\0" * 8, "8 bytes after the last tensor"),
        ({"w": {**entry, "data_offsets": [8, 24]}}, b"\0" * 8 + four, "starts at 8, expected 0"),
        ({"w": entry, "__metadata__": {"a": 1}}, four, "__metadata__ must map strings to strings"),
    ]
    for header, data, message in cases:
        with pytest.raises(GraphFileError, match=message):
            load_graph(with_weights(safetensors_bytes(header, data)))
    with pytest.raises(GraphFileError, match="header claims 1000 bytes"):
        load_graph(with_weights(safetensors_bytes({"w": entry}, four, header_len=1000)))
    with pytest.raises(GraphFileError, match="header is 4294967296 bytes, over the limit"):
        load_graph(with_weights(safetensors_bytes({"w": entry}, four, header_len=2**32)))


def test_bool_weights_hold_only_zero_and_one():
    g = lm.Graph()
    g.weight("m", (2,), lm.bool).output("m")
    g.bind({"m": np.array([True, False])})
    header = {"m": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}}
    parts = entries(graph_to_bytes(g))
    with pytest.raises(GraphFileError, match="bytes other than 0 and 1"):
        load_graph(pack({**parts, WEIGHTS: safetensors_bytes(header, b"\x01\x07")}))


def test_random_corruption_only_ever_raises_graph_file_error():
    """Flipped bytes in the container and random values in graph.json: the file loads or is rejected cleanly."""
    rng = np.random.default_rng(5)
    good = graph_to_bytes(rich_graph()[0])
    parts = entries(good)
    junk = [0, -1, 2**40, 1.5, True, None, "x", [], {}, ["var", "b", 0, -1], ["mod", 1, 0], "Iota", "float16"]
    rejected = 0
    for _ in range(100):
        data = bytearray(good)
        data[rng.integers(len(data))] = rng.integers(256)
        doc = json.loads(parts[GRAPH])
        target = doc["nodes"][rng.integers(len(doc["nodes"]))]
        for key in rng.permutation(sorted(target))[:1]:
            while isinstance(target[key], (list, dict)) and len(target[key]) and rng.random() < 0.7:
                target, key = (
                    target[key],
                    rng.choice(list(target[key]) if isinstance(target[key], dict) else range(len(target[key]))),
                )
            target[key] = junk[rng.integers(len(junk))]
        for candidate in (bytes(data), pack({**parts, GRAPH: json.dumps(doc).encode()})):
            try:
                load_graph(candidate)
            except GraphFileError:
                rejected += 1
    assert rejected > 100  # most of the 200 corruptions are caught (some hit timestamps or padding)
