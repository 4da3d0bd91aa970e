"""The .lgraph file's entries: defects in the manifest, the graph JSON and the weights are refused with a
GraphFileError that names them, and random corruption never raises anything else."""

from __future__ import annotations

import json

import numpy as np
import pytest

import luminal as lm
from luminal import graph_json
from luminal.graph_file import GraphFileError, graph_to_bytes, load_graph
from luminal.hl import prim
from luminal.view import idx
from tests.graph_files import (
    GRAPH,
    MANIFEST,
    WEIGHTS,
    edit,
    entries,
    pack,
    rich_graph,
    safetensors_bytes,
    small_graph,
    with_weights,
)

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


def test_manifest_strings_are_bounded():
    long_input = lambda m: m["signature"]["inputs"][0].__setitem__("name", "x" * 300)  # noqa: E731
    cases = [
        (
            lambda m: m.__setitem__("luminal_version", "9" * 100_000),
            "luminal_version is 100000 characters, over the limit of 64",
        ),
        (long_input, "input name is 300 characters, over the limit of 256"),
        (
            lambda m: m.__setitem__("symbols", {"b" * 65: {"min": 1, "max": 8}}),
            "symbol name is 65 characters, over the limit of 64",
        ),
    ]
    for fn, message in cases:
        with pytest.raises(GraphFileError, match=message):
            load_graph(edit(MANIFEST, fn))


def test_a_long_name_in_graph_json_is_refused_briefly():
    def rename(doc):
        doc["nodes"][0]["params"]["label"] = "x" * 100_000
        doc["inputs"] = {"x" * 100_000: 0}

    with pytest.raises(GraphFileError, match="at most 256 characters, got 100000 characters") as refused:
        load_graph(edit(GRAPH, rename))
    assert len(str(refused.value)) < 300  # the message names the problem, it does not echo the name


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
        (lambda d: d["nodes"][1]["params"].__setitem__("dtype", "complex64"), "unknown dtype 'complex64'"),
        (node(3, "dtype", "complex"), "node 3 .*unknown dtype"),
        (node(3, "dtype", "uint128"), "node 3 .*unknown dtype 'uint128'"),
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
        (256, "uint8", "not a valid uint8"),
        (-129, "int8", "not a valid int8"),
        (-1, "uint64", "not a valid uint64"),
        (2**64, "uint64", "not a valid uint64"),
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
        ({"w": {**entry, "dtype": "C64"}}, four, "unsupported dtype 'C64'"),
        ({"w": {**entry, "dtype": "U32"}}, four, "holds uint32"),
        ({"w": {**entry, "dtype": "U128"}}, four, "unsupported dtype 'U128'"),
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
