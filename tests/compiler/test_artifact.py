"""Compiled-program artifacts: save/load round trips, deterministic bytes, the compile cache, hostile files.

`pytest -s` prints the transformer block's cold and cached compile times.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import os
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.compiler.artifact import ArtifactError, load_program, program_to_bytes, save_program
from luminal.compiler.kernels import ir
from luminal.compiler.storage.artifact_json import program_from_json, program_to_json
from luminal.dtypes import float32
from tests.graph_fuzz import random_graph

D, HEADS, SEQ = 16, 2, 6
ROOT = Path(__file__).resolve().parents[2]  # the checkout, so the subprocess can import tests.*


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path / "cache"))


def block(scale: float = 1.0) -> tuple[lm.Graph, dict[str, np.ndarray]]:
    """A pre-norm transformer block over a symbolic batch: attention and a GELU MLP, each with a residual."""
    rng = np.random.default_rng(0)
    g = lm.Graph()
    x = g.input("x", [lm.sym("batch", max=8), SEQ, D])
    shapes = {"ln1_w": [D], "ln1_b": [D], "qkv_w": [3 * D, D], "qkv_b": [3 * D], "out_w": [D, D]}
    shapes |= {"ln2_w": [D], "ln2_b": [D], "up_w": [4 * D, D], "up_b": [4 * D], "down_w": [D, 4 * D]}
    w = {name: g.weight(name, shape) for name, shape in shapes.items()}
    g.bind({n: (scale * rng.standard_normal(s) / math.sqrt(s[-1])).astype(np.float32) for n, s in shapes.items()})
    qkv = F.linear(F.layer_norm(x, D, w["ln1_w"], w["ln1_b"]), w["qkv_w"], w["qkv_b"])
    q, k, v = (
        F.permute(F.reshape(qkv[:, :, i * D : (i + 1) * D], -1, SEQ, HEADS, D // HEADS), 0, 2, 1, 3) for i in range(3)
    )
    attn = F.reshape(F.permute(F.scaled_dot_product_attention(q, k, v, is_causal=True), 0, 2, 1, 3), -1, SEQ, D)
    h = x + F.linear(attn, w["out_w"])
    y = h + F.linear(F.gelu(F.linear(F.layer_norm(h, D, w["ln2_w"], w["ln2_b"]), w["up_w"], w["up_b"])), w["down_w"])
    y.output("y")
    return g, {"x": rng.standard_normal((3, SEQ, D)).astype(np.float32)}


def same(a, b) -> bool:
    """Field-by-field equality that tells -0.0 from 0.0, 1 from 1.0, and counts nan equal to nan."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, tuple | list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b  # str, int, bool, DType, Expr (structural equality of canonical forms)


def check_round_trip(g, feed):
    prog = lm.compile(g, "cpu", cache=False)
    back = load_program(program_to_bytes(prog))
    assert same(back.kernels, prog.kernels) and back.plan == prog.plan
    assert back.source == prog.source and back.target == prog.target
    want, got, ref = prog.run(feed), back.run(feed), lm.run(g, feed)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-5, atol=1e-5)


def test_block_round_trip(tmp_path):
    g, feed = block()
    check_round_trip(g, feed)
    prog = lm.compile(g, "cpu", cache=False)
    save_program(prog, tmp_path / "block.lprog")
    assert same(load_program(tmp_path / "block.lprog").kernels, prog.kernels)


@pytest.mark.parametrize("seed", range(24))
def test_fuzz_round_trip(seed):
    check_round_trip(*random_graph(seed))


def test_reference_target_round_trip():
    g, feed = random_graph(5)
    prog = lm.compile(g, "reference", cache=False)
    back = load_program(program_to_bytes(prog))
    assert back.kernels is None and back.source == ""
    want = prog.run(feed)
    for name, got in back.run(feed).items():
        np.testing.assert_array_equal(got, want[name])


def test_constants_exact():
    """inf, -inf, nan, -0.0 and the Python type of every constant survive (JSON has no inf/nan literal)."""
    consts = [ir.Const(v, float32) for v in (math.inf, -math.inf, math.nan, -0.0, 0.0, 1, 1.0, True, 2.5e-300)]
    body = ir.Apply("Add", (consts[0], consts[1]), float32)
    for c in consts[2:]:
        body = ir.Apply("Mul", (body, c), float32)
    kernels = ir.KernelProgram(
        buffers={"b0": ir.Buffer("b0", float32, lm.sym("n"), "output", "y")},
        kernels=[ir.LoopKernel("k0", "b0", (lm.sym("n"),), body)],
        outputs={"y": ("b0", (lm.sym("n"),))},
    )
    data = json.loads(json.dumps(program_to_json(kernels)))  # through real JSON text, as on disk
    back = program_from_json(data)
    assert same(back, kernels)
    leaves = [v for v in ir.walk(back.kernels[0].body) if isinstance(v, ir.Const)]
    assert math.copysign(1, [c.value for c in leaves if c.value == 0][0]) == -1


_DIGEST = """
import hashlib, luminal as lm
from tests.compiler.test_artifact import block
from luminal.compiler.artifact import load_program, program_to_bytes
from luminal.compiler.storage.cache import cache_dir
prog = lm.compile(block()[0], "cpu")
(cached,) = cache_dir().glob("*.lprog")
assert load_program(cached).source == prog.source
print(hashlib.sha256(program_to_bytes(prog)).hexdigest())
"""


def test_deterministic_bytes(tmp_path):
    """Two processes with fresh caches compile the block to the same bytes. Separate processes because
    fuse.py names fused reduction variables from a per-process counter, so a second compile in one process
    differs in those names; each process also checks that its cached copy loads."""
    digests = []
    for run in range(2):
        env = {**os.environ, "LUMINAL_CACHE_DIR": str(tmp_path / f"c{run}")}
        done = subprocess.run([sys.executable, "-c", _DIGEST], env=env, cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        digests.append(done.stdout.strip())
    assert digests[0] == digests[1] and len(digests[0]) == 64


def test_cache_hit_and_weight_miss():
    g, feed = block()
    start = time.perf_counter()
    cold = lm.compile(g, "cpu")
    cold_s = time.perf_counter() - start
    start = time.perf_counter()
    warm = lm.compile(g, "cpu")
    warm_s = time.perf_counter() - start
    print(f"\ntransformer block: cold compile {cold_s * 1e3:.1f} ms, cached compile {warm_s * 1e3:.1f} ms")
    assert not cold.report["cache"]["hit"] and warm.report["cache"]["hit"]
    assert same(warm.kernels, cold.kernels) and warm.source == cold.source
    np.testing.assert_array_equal(warm.run(feed)["y"], cold.run(feed)["y"])
    assert not lm.compile(g, "cpu", cache=False).report.get("cache")
    other, _ = block(scale=1.01)  # the same structure, different weights: another program
    changed = lm.compile(other, "cpu")
    assert not changed.report["cache"]["hit"]
    np.testing.assert_allclose(changed.run(feed)["y"], lm.run(other, feed)["y"], rtol=1e-5, atol=1e-5)


def test_corrupt_cache_entry_is_recompiled(tmp_path):
    g, _ = block()
    key = lm.compile(g, "cpu").report["cache"]["key"]
    (tmp_path / "cache" / "programs" / f"{key}.lprog").write_bytes(b"garbage")
    assert not lm.compile(g, "cpu").report["cache"]["hit"]
    assert lm.compile(g, "cpu").report["cache"]["hit"]


# ---- hostile artifacts ---------------------------------------------------------------------------------


def _edit(blob: bytes, name: str, change, fix_digest: bool = True) -> bytes:
    """Rewrite one entry; with fix_digest the manifest is updated too, as an attacker would."""
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        entries = {n: zf.read(n) for n in zf.namelist()}
    entries[name] = change(entries[name])
    manifest = json.loads(entries["manifest.json"])
    if fix_digest and name != "manifest.json":
        manifest["entries"][name] = {"sha256": hashlib.sha256(entries[name]).hexdigest(), "size": len(entries[name])}
        entries["manifest.json"] = json.dumps(manifest).encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for n, data in entries.items():
            zf.writestr(n, data)
    return out.getvalue()


def _json_edit(edit):
    def change(data: bytes) -> bytes:
        doc = json.loads(data)
        edit(doc)
        return json.dumps(doc).encode()

    return change


@pytest.fixture(scope="module")
def blob() -> bytes:
    g, _ = block()
    return program_to_bytes(lm.compile(g, "cpu", cache=False))


def _packed(doc):
    return next(b for b in doc["buffers"] if b["role"] == "packed")


def _first(rows, kind):
    return next(r for r in rows if r["kind"] == kind)


@pytest.mark.parametrize(
    "name,change,message",
    [
        ("manifest.json", _json_edit(lambda m: m.update(format_version=99)), "format version"),
        ("manifest.json", _json_edit(lambda m: m.update(compiler_version="0+old")), "compiler version"),
        ("manifest.json", _json_edit(lambda m: m.update(target="h100")), "target h100"),  # its source is CUDA
        ("manifest.json", _json_edit(lambda m: m.update(target="m2")), "target"),  # its source is C, not MSL
        ("manifest.json", _json_edit(lambda m: m.update(graph_hash="x")), "graph_hash"),
        ("kernels.json", _json_edit(lambda d: _first(d["values"], "apply").update(kind="pickle")), "value kind"),
        ("kernels.json", _json_edit(lambda d: _first(d["values"], "apply").update(op="System")), "unknown op"),
        ("kernels.json", _json_edit(lambda d: _first(d["values"], "apply").update(args=[10**6, 0])), "earlier value"),
        ("kernels.json", _json_edit(lambda d: _first(d["values"], "load").update(buffer="nope")), "declared buffer"),
        ("kernels.json", _json_edit(lambda d: _first(d["values"], "load").update(dtype="float128")), "dtype"),
        ("kernels.json", _json_edit(lambda d: d["kernels"][0].update(name="k(){system(0);}")), "identifier"),
        ("kernels.json", _json_edit(lambda d: d["kernels"][0].update(kind="gpu")), "kernel kind"),
        ("kernels.json", _json_edit(lambda d: d["buffers"][0].update(role="root")), "role"),
        ("kernels.json", _json_edit(lambda d: d.pop("symbols")), "wrong keys"),
        ("kernels.json", _json_edit(lambda d: _packed(d).update(label=d["kernels"][0]["name"])), "does not hold"),
        ("kernels.json", _json_edit(lambda d: _packed(d).update(size=1)), "does not hold"),
        ("kernels.json", _json_edit(lambda d: d["kernels"].reverse()), "program.c"),  # IR no longer matches the C
        ("program.c", lambda s: s + b"\n__attribute__((constructor)) void evil(void) {}\n", "program.c"),
        ("graph.lgraph", lambda s: s[:100], "graph.lgraph"),
        ("report.json", lambda s: b"[1, 2", "report.json"),
    ],
)
def test_tampered(blob, name, change, message):
    """verify=True: the structural checks every load makes, and the source and plan regenerated from the IR."""
    with pytest.raises(ArtifactError, match=message):
        load_program(_edit(blob, name, change), verify=True)


def test_digest_mismatch_and_truncation(blob):
    with pytest.raises(ArtifactError, match="sha256"):
        load_program(_edit(blob, "program.c", lambda s: s + b"\n", fix_digest=False))
    for cut in (0, 10, len(blob) // 2, len(blob) - 1):
        with pytest.raises(ArtifactError):
            load_program(blob[:cut])
    assert load_program(_edit(blob, "report.json", lambda s: s)).kernels  # the rewrite itself is harmless
    extra = io.BytesIO(blob)
    with zipfile.ZipFile(extra, "a") as zf:
        zf.writestr("payload.so", b"\x7fELF")
    with pytest.raises(ArtifactError, match="entries"):
        load_program(extra.getvalue())


def test_cache_checks_graph_hash(blob):
    with pytest.raises(ArtifactError, match="compiled from graph"):
        load_program(blob, "cpu", "0" * 64)
