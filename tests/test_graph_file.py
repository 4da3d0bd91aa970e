"""The .lgraph file as a whole: exact round trips, deterministic atomic writes, and rejection of hostile
containers (zip tricks, sizes, compression bombs). Its entries' contents: test_graph_file_entries.py."""

from __future__ import annotations

import io
import json
import os
import struct
import tracemalloc
import zipfile

import numpy as np
import pytest
import safetensors.torch
import torch

import luminal as lm
from luminal import graph_file
from luminal.graph_file import GraphFileError, graph_to_bytes, load_graph
from luminal.hl import prim
from luminal.symbolic import var
from tests.graph_files import (
    GRAPH,
    MANIFEST,
    WEIGHTS,
    entries,
    pack,
    raw_zip,
    rich_graph,
    small_graph,
    zero_stream,
)

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


@pytest.mark.parametrize("d", lm.dtypes.INTEGERS, ids=lambda d: d.name)
def test_every_integer_dtype_round_trips(tmp_path, d):
    """Weights (safetensors I8 .. U64), inputs, outputs and constants at the type's extremes survive a save and
    load bit for bit, and the loaded graph computes what the saved one does."""
    g = lm.Graph()
    x = g.input("x", (3,), dtype=d)
    w = g.weight("w", (3,), dtype=d)
    (x + w + g.constant(d.max, d) + g.constant(d.min, d)).output("y")
    weights = np.array([d.min, d.max, 1], d.np)
    g.bind({"w": weights})
    path = tmp_path / "ints.lgraph"
    lm.save(g, path)
    g2 = lm.load(path)
    assert g2.weight_data["w"].dtype == d.np and g2.weight_data["w"].tobytes() == weights.tobytes()
    manifest = json.loads(zipfile.ZipFile(path).read(MANIFEST))
    assert manifest["signature"]["inputs"][0]["dtype"] == d.name
    feed = {"x": np.array([d.max, 0, d.min], d.np)}
    want, got = lm.run(g, feed)["y"], lm.run(g2, feed)["y"]
    assert got.dtype == d.np
    np.testing.assert_array_equal(got, want)


def test_float64_round_trips_bit_for_bit(tmp_path):
    """F64 weights and a float64 constant keep the digits float32 would lose, and torch reads the weights."""
    g = lm.Graph()
    x = g.input("x", (3,), dtype=lm.float64)
    (x * g.weight("w", (3,), dtype=lm.float64) + g.constant(0.1, lm.float64)).output("y")
    weights = np.array([1 + 2.0**-40, -np.pi, 1e300])
    g.bind({"w": weights})
    path = tmp_path / "f64.lgraph"
    lm.save(g, path)
    g2 = lm.load(path)
    assert g2.weight_data["w"].tobytes() == weights.tobytes()
    assert safetensors.torch.load(zipfile.ZipFile(path).read(WEIGHTS))["w"].dtype == torch.float64
    feed = {"x": np.array([3.0, 1 / 3, -1e-300])}
    got = lm.run(g2, feed)["y"]
    assert got.dtype == np.float64 and got.tobytes() == (feed["x"] * weights + 0.1).tobytes()


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
