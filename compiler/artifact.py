"""The compiled-program artifact (`.lprog`): one zip that saves a CompiledProgram and loads it back, no pickle.

Entries: manifest.json (format name and version, compiler version, target, the source graph's hash, the sha256
and size of every other entry), graph.lgraph (the optimized graph with its weights, as `luminal.graph_file`
writes it), kernels.json (the kernel IR, `compiler.storage.artifact_json`, and under "plan" its run plan, what
the runtime reads instead of planning: launches, merged kernels, in-place inputs; `compiler.storage.plan_json`),
program.c (the generated source: C for the cpu target, CUDA C++ for the GPU targets; the entry keeps its name
across targets) and report.json (the compile report without its timings).

Writing is deterministic: the same graph and target give the same bytes (sorted JSON keys, fixed zip
timestamps and attributes, timings left out). Reading treats the file as hostile like the graph loader: sizes
are capped before and while reading, every kind, op and name is checked. Every defect raises `ArtifactError`
naming it. The stored source and plan are taken as they are, as the shared library built from them would be:
`verify=True` also regenerates both from the stored IR and refuses a file whose source or plan differs, for a
file from outside the platform's own artifact store.
Format 1 (no run plan) is refused with its version named, not planned at load: its compiler version differs
from this one's anyway (COMPILER_VERSION hashes the compiler's sources), so it would be refused as stale, and
planning at load is what the runtimes no longer import the compiler for.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import struct
import zipfile
from typing import IO, Any

from luminal.compiler import COMPILER_VERSION
from luminal.compiler.backends import program_source, run_plan
from luminal.compiler.program import TARGETS, CompiledProgram
from luminal.compiler.storage.artifact_json import ArtifactError, program_from_json, program_to_json
from luminal.compiler.storage.gc_pause import collector_paused
from luminal.compiler.storage.plan_json import plan_from_json, plan_to_json
from luminal.graph import Graph
from luminal.graph_file import MAX_FILE_BYTES as MAX_GRAPH_BYTES
from luminal.graph_file import graph_fingerprint, graph_to_bytes, load_graph
from luminal.graph_json import GraphFileError, dump_json, parse_json
from luminal.safezip import end_record, entry_info, read_entry, write_atomic

FORMAT_NAME = "luminal.lprog"
FORMAT_VERSION = 2  # 2: kernels.json carries the run plan
PLAN = "plan"  # the run plan's key in kernels.json
MANIFEST, GRAPH, KERNELS, SOURCE, REPORT = "manifest.json", "graph.lgraph", "kernels.json", "program.c", "report.json"
MiB = 2**20
# Uncompressed caps per entry. The IR and the C source are ~1 KiB per kernel and a large model has ~10^5
# kernels; the graph entry is capped by the graph format itself; reports are a few stage summaries.
ENTRY_CAPS = {MANIFEST: 1 * MiB, GRAPH: MAX_GRAPH_BYTES, KERNELS: 512 * MiB, SOURCE: 512 * MiB, REPORT: 16 * MiB}
MAX_FILE_BYTES = sum(ENTRY_CAPS.values()) + 1 * MiB  # plus zip headers
MAX_RATIO = 200  # deflate of real JSON or C stays far below; a higher declared ratio is a compression bomb
RATIO_FLOOR = 1 * MiB
MANIFEST_KEYS = {"format", "format_version", "compiler_version", "target", "graph_hash", "entries"}
_HEX64 = re.compile(r"[0-9a-f]{64}")


def graph_hash(graph: Graph) -> str:
    """The source graph's identity: its fingerprint (sha256 of its structure and every weight's bytes)."""
    return graph_fingerprint(graph)


# ---- writing -------------------------------------------------------------------------------------------


def stable_report(report: Any) -> Any:
    """The report without timings (keys "seconds" and "cache"): they differ per run and would break determinism."""
    if isinstance(report, dict):
        return {k: stable_report(v) for k, v in report.items() if k not in ("seconds", "cache")}
    if isinstance(report, list | tuple):
        return [stable_report(v) for v in report]
    return report


def code_entries(prog: CompiledProgram) -> dict[str, bytes]:
    """The entries besides the graph: kernel IR and run plan, generated source, report (a bundle of several
    programs that stores their weights once carries these per program)."""
    kernels = None if prog.kernels is None else {**program_to_json(prog.kernels), PLAN: plan_to_json(prog.plan)}
    return {
        KERNELS: dump_json(kernels),
        SOURCE: prog.source.encode(),
        REPORT: dump_json(stable_report(prog.report)),
    }


def program_to_bytes(prog: CompiledProgram, source_hash: str | None = None) -> bytes:
    """The artifact's bytes. `source_hash` is the hash of the graph given to compile (the cache key's part);
    by default the hash of the program's own (optimized) graph."""
    entries = {GRAPH: graph_to_bytes(prog.graph), **code_entries(prog)}
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "compiler_version": COMPILER_VERSION,
        "target": prog.target,
        "graph_hash": source_hash or graph_hash(prog.graph),
        "entries": {n: {"sha256": hashlib.sha256(b).hexdigest(), "size": len(b)} for n, b in entries.items()},
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in {MANIFEST: dump_json(manifest), **entries}.items():
            method = zipfile.ZIP_STORED if name == GRAPH else zipfile.ZIP_DEFLATED  # the graph holds the weights
            zf.writestr(entry_info(name, method), data)
    return buf.getvalue()


def save_program(prog: CompiledProgram, path: Any, source_hash: str | None = None) -> None:
    """Write the artifact atomically: on any error no file (and no half-written one) is left at `path`."""
    data = program_to_bytes(prog, source_hash)
    write_atomic(path, lambda f: f.write(data), ".lprog-")


# ---- reading -------------------------------------------------------------------------------------------


def load_program(
    source: Any, target: str | None = None, source_hash: str | None = None, *, verify: bool = False
) -> CompiledProgram:
    """Read an artifact (a path, or its bytes). `target` and `source_hash`, when given, must match the manifest.

    `verify=True` also regenerates the source and the run plan from the kernel IR and compares them with the
    stored ones (a third of a cached compile's time): for a file from elsewhere than the platform's own store."""
    with collector_paused():
        if isinstance(source, bytes | bytearray | memoryview):
            data = bytes(source)
            return _load(io.BytesIO(data), len(data), target, source_hash, verify)
        with open(os.fspath(source), "rb") as f:
            return _load(f, os.fstat(f.fileno()).st_size, target, source_hash, verify)


def _load(f: IO[bytes], size: int, target: str | None, source_hash: str | None, verify: bool = False):
    if size > MAX_FILE_BYTES:
        raise ArtifactError(f"the artifact is {size} bytes, over the limit of {MAX_FILE_BYTES}")
    _check_end_record(f, size)
    try:
        zf = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError, struct.error) as e:
        raise ArtifactError(f"corrupt zip archive: {e}") from None
    with zf:
        infos = {info.filename: info for info in zf.infolist()}
        if len(infos) != len(zf.infolist()) or set(infos) != set(ENTRY_CAPS):
            raise ArtifactError(f"the archive must hold exactly {sorted(ENTRY_CAPS)}, it holds {sorted(infos)[:8]}")
        raw = {name: _read_entry(zf, info, size) for name, info in infos.items()}
    manifest = _json(raw[MANIFEST], MANIFEST)
    _check_manifest(manifest, target, source_hash)
    for name, data in raw.items():
        entry = manifest["entries"][name] if name != MANIFEST else None
        if entry is not None and (entry["size"] != len(data) or entry["sha256"] != hashlib.sha256(data).hexdigest()):
            raise ArtifactError(f"{name} does not match the size and sha256 the manifest records for it")
    try:
        graph = load_graph(bytes(raw[GRAPH]))
    except GraphFileError as e:
        raise ArtifactError(f"{GRAPH}: {e}") from None
    return program_from_entries(graph, manifest["target"], raw, verify)


def program_from_entries(graph: Graph, target_name: str, raw: Any, verify: bool = False) -> CompiledProgram:
    """The program of `graph` (its weights bound) and its `code_entries` bytes, checked as `load_program` checks
    them (`verify`: the stored source and run plan must be what the IR generates); `target_name` must already
    be a known target."""
    kernels_json = _json(raw[KERNELS], KERNELS)
    if (kernels_json is None) != (target_name == "reference"):
        raise ArtifactError(f"{KERNELS}: target {target_name!r} needs kernels exactly when it is not reference")
    kernels, plan = None, None
    if kernels_json is not None:
        if not isinstance(kernels_json, dict) or PLAN not in kernels_json:
            raise ArtifactError(f"{KERNELS} has no run plan: written by artifact format 1 or older; recompile")
        plan_json = kernels_json.pop(PLAN)
        kernels = program_from_json(kernels_json)
        plan = plan_from_json(plan_json, kernels)
    try:
        text = bytes(raw[SOURCE]).decode("utf-8")
    except UnicodeDecodeError:
        raise ArtifactError(f"{SOURCE} is not UTF-8") from None
    if verify:
        _verify(kernels, plan, text, target_name)
    if kernels is not None:
        _check_signature(kernels, graph)
    report = _json(raw[REPORT], REPORT)
    if not isinstance(report, dict):
        raise ArtifactError(f"{REPORT} must be a JSON object")
    return CompiledProgram(graph, target_name, kernels, text, report, plan)


def _verify(kernels: Any, plan: Any, text: str, target_name: str) -> None:
    """The stored source and run plan must be what this compiler makes of the stored IR."""
    try:
        expected = "" if kernels is None else program_source(kernels, target_name)
        expected_plan = None if kernels is None else run_plan(kernels, target_name)
    except ValueError as e:  # an IR that decodes but cannot be code (a packed buffer that fits no GEMM)
        raise ArtifactError(f"{KERNELS}: {e}") from None
    if text != expected:
        raise ArtifactError(
            f"{SOURCE} is not the code this compiler generates for target {target_name} from {KERNELS} "
            "(tampered or stale)"
        )
    if plan != expected_plan:
        raise ArtifactError(
            f"the run plan in {KERNELS} is not the plan this compiler makes for target {target_name} of its IR "
            "(tampered or stale)"
        )


def _json(data: bytearray, what: str) -> Any:
    try:
        return parse_json(bytes(data), what)
    except GraphFileError as e:
        raise ArtifactError(str(e)) from None


def _check_end_record(f: IO[bytes], size: int) -> None:
    count, directory_size = end_record(f, size, ArtifactError)
    if count != len(ENTRY_CAPS) or directory_size > 4096:  # five short names need ~300 bytes
        raise ArtifactError(f"the archive lists {count} entries in {directory_size} bytes; an artifact has 5")


def _read_entry(zf: zipfile.ZipFile, info: zipfile.ZipInfo, size: int) -> bytearray:
    """The entry's bytes, reading at most its declared size (itself capped) plus one byte to detect lies."""
    name, limit = info.filename, min(info.file_size, ENTRY_CAPS[info.filename])
    if info.flag_bits & 0x1 or info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise ArtifactError(f"entry {name} is encrypted or uses unsupported compression {info.compress_type}")
    if info.file_size > ENTRY_CAPS[name]:
        raise ArtifactError(f"entry {name} declares {info.file_size} bytes, over the cap of {ENTRY_CAPS[name]}")
    if info.header_offset + info.compress_size > size:
        raise ArtifactError(f"entry {name} extends past the end of the file (truncated?)")
    if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
        raise ArtifactError(f"entry {name} would inflate {info.compress_size} bytes to {info.file_size}: a bomb")
    return read_entry(zf, info, limit, ArtifactError)


def _check_manifest(manifest: Any, target: str | None, source_hash: str | None) -> None:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        shown = manifest.get("format") if isinstance(manifest, dict) else manifest
        raise ArtifactError(f"not a compiled program: {MANIFEST} names format {shown!r:.60}, not {FORMAT_NAME!r}")
    version = manifest.get("format_version")
    if type(version) is not int or version != FORMAT_VERSION:
        raise ArtifactError(
            f"unsupported artifact format version {version!r:.40}; this luminal reads {FORMAT_VERSION} (recompile)"
        )
    if set(manifest) != MANIFEST_KEYS:
        raise ArtifactError(f"{MANIFEST} has the wrong keys {sorted(manifest)[:10]}; expected {sorted(MANIFEST_KEYS)}")
    if manifest["compiler_version"] != COMPILER_VERSION:
        raise ArtifactError(
            f"compiled by compiler version {manifest['compiler_version']!r:.60}, this is {COMPILER_VERSION}: recompile"
        )
    if manifest["target"] not in TARGETS or (target is not None and manifest["target"] != target):
        raise ArtifactError(f"the artifact's target {manifest['target']!r:.40} is not {target or TARGETS}")
    if not isinstance(manifest["graph_hash"], str) or not _HEX64.fullmatch(manifest["graph_hash"]):
        raise ArtifactError(f"graph_hash {manifest['graph_hash']!r:.80} is not a sha256 hex digest")
    if source_hash is not None and manifest["graph_hash"] != source_hash:
        raise ArtifactError(f"the artifact was compiled from graph {manifest['graph_hash']}, not {source_hash}")
    entries = manifest["entries"]
    if not isinstance(entries, dict) or set(entries) != set(ENTRY_CAPS) - {MANIFEST}:
        raise ArtifactError(f"{MANIFEST} entries must describe exactly {sorted(set(ENTRY_CAPS) - {MANIFEST})}")
    for name, entry in entries.items():
        if not isinstance(entry, dict) or set(entry) != {"sha256", "size"}:
            raise ArtifactError(f"{MANIFEST} entry {name} must hold exactly sha256 and size")


def _check_signature(kernels: Any, graph: Any) -> None:
    """The IR must bind exactly the graph's inputs, weights and outputs, or a run would fail or read nothing."""
    for what, ir_side, graph_side in (
        ("inputs", kernels.inputs, graph.inputs),
        ("weights", kernels.weights, graph.weights),
        ("outputs", kernels.outputs, graph.outputs),
    ):
        if not set(ir_side) <= set(graph_side) or (what == "outputs" and set(ir_side) != set(graph_side)):
            raise ArtifactError(
                f"{KERNELS} {what} {sorted(ir_side)[:8]} disagree with the graph's {sorted(graph_side)[:8]}"
            )


__all__ = [
    "ArtifactError",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "code_entries",
    "load_program",
    "program_from_entries",
    "program_to_bytes",
    "save_program",
]
