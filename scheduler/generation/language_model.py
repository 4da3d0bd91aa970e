"""A deployed language model: its LLM package compiled for a target (`.llmprog`), and that file loaded back for
serving.

Format 4 holds the prefill, decode-step and prefill-chunk programs' code (graph.json, kernel IR, generated
source, report, per program) and their weights once, in one safetensors entry all programs bind
(`shared_weights`), beside the package's tokenizer files; its step and chunk are paged (KV block pools written
in place), with the manifest's `block_size`, and the engine prefills prompts a chunk at a time. Format 3 is the
same without the chunk program (any of them may carry LoRA: the manifest's "lora" layout, every program with
the per-row adapter inputs, and the adapters deployed with the model in `lora_adapters.safetensors`; the
engine's `LoraBank` holds the stacks the programs read); format 3 is the
same without the chunk program (packages without a chunk graph still compile to it: the engine prefills in one
go), format 2 the same with the concatenating step (packages without a paged step still compile to it), and
both are still read, as is format 1: two self-contained `.lprog` entries, each with every weight.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import luminal as lm
from luminal.compiler import COMPILER_VERSION
from luminal.compiler.artifact import KERNELS, REPORT, SOURCE, code_entries, load_program, program_from_entries
from luminal.compiler.program import TARGETS, CompiledProgram
from luminal.compiler.storage.artifact_json import ArtifactError
from luminal.graph_file import WEIGHTS, _safetensors_parts, read_safetensors
from luminal.graph_json import GraphFileError, decode_graph, dump_json, encode_graph, parse_json, signature
from luminal.llm_package import (
    CHAT_TEMPLATE,
    CONFIG,
    GENERATION_CONFIG,
    TOKENIZER,
    TOKENIZER_CONFIG,
    load_package,
    text_entries,
)
from luminal.lora_bank import LoraBank
from luminal.lora_package import ENTRY as LORA_ENTRY
from luminal.lora_package import bank_for, decode_adapters, encode_adapters
from luminal.nn.lora import LoraLayout
from luminal.padding import PaddingError, apply_manifest_padding
from luminal.scheduler.compute_thread import ComputeThread
from luminal.scheduler.generation.resident_weights import release_packed_weights
from luminal.scheduler.generation.shared_weights import bind_shared, weights_graph
from luminal.scheduler.generation.tokenizer import TextCodec
from luminal.scheduler.programs import LoadedProgram
from luminal.zip_bundle import BundleFormat, read_bundle, write_bundle

PROGRAMS = ("prefill", "step")
CHUNKED_PROGRAMS = (*PROGRAMS, "chunk")
PARTS = {"graph.json": None, KERNELS: KERNELS, SOURCE: SOURCE, REPORT: REPORT}  # entry suffix -> code_entries key
MiB, GiB = 1 << 20, 1 << 30
TEXT_CAPS = {CONFIG: 1 * MiB, TOKENIZER: 64 * MiB, TOKENIZER_CONFIG: 16 * MiB, CHAT_TEMPLATE: 1 * MiB,
             GENERATION_CONFIG: 1 * MiB}  # fmt: skip
PROGRAM_CAPS = {"graph.json": 256 * MiB, KERNELS: 512 * MiB, SOURCE: 512 * MiB, REPORT: 16 * MiB}
FORMAT = BundleFormat(
    name="luminal.llmprog",
    version=2,
    caps={
        **{f"{p}.{part}": cap for p in PROGRAMS for part, cap in PROGRAM_CAPS.items()},
        WEIGHTS: 66 * GiB,
        LORA_ENTRY: 16 * GiB,
        **TEXT_CAPS,
    },
    required=frozenset({f"{p}.{part}" for p in PROGRAMS for part in PARTS} | {WEIGHTS, CONFIG, TOKENIZER}),
    error=ArtifactError,
    stored=frozenset({WEIGHTS}),
)
FORMAT_V3 = replace(FORMAT, version=3)  # the step program is the paged one
FORMAT_V4 = replace(  # and a paged chunk program beside it
    FORMAT,
    version=4,
    caps={**FORMAT.caps, **{f"chunk.{part}": cap for part, cap in PROGRAM_CAPS.items()}},
    required=FORMAT.required | {f"chunk.{part}" for part in PARTS},
)
V1_PREFILL, V1_STEP = "prefill.lprog", "step.lprog"
FORMAT_V1 = BundleFormat(  # each program self-contained: every weight twice
    name=FORMAT.name,
    version=1,
    caps={V1_PREFILL: 66 * GiB, V1_STEP: 66 * GiB, **TEXT_CAPS},
    required=frozenset({V1_PREFILL, V1_STEP, CONFIG, TOKENIZER}),
    error=ArtifactError,
    stored=frozenset({V1_PREFILL, V1_STEP}),
)


@dataclass
class LanguageModel:
    prefill: LoadedProgram
    step: LoadedProgram
    codec: TextCodec
    layers: int
    max_batch: int  # rows one decode step takes (the graphs' batch symbol)
    max_positions: int  # prompt plus generated tokens of one sequence
    block_size: int | None = None  # positions per KV block of a paged step; None: the step concatenates caches
    chunk: LoadedProgram | None = None  # the paged prefill chunk (format 4); None: prompts are prefilled at once
    lora: LoraBank | None = None  # the adapters' stacks every program reads (None: built without LoRA)


def compile_package(package_path: Path, target: str, out_path: Path) -> None:
    """Compile an uploaded LLM package's prefill, step and chunk graphs for `target` and write the `.llmprog`."""
    package = load_package(package_path)
    step = package.graphs.step if package.paged is None else package.paged
    programs = {
        "prefill": lm.compile(package.graphs.prefill, target=target),
        "step": lm.compile(step, target=target),
    }
    if package.chunk is not None:
        programs["chunk"] = lm.compile(package.chunk, target=target)
    entries: dict[str, list] = {WEIGHTS: _safetensors_parts(weights_graph({p: c.graph for p, c in programs.items()}))}
    for name, prog in programs.items():
        code = code_entries(prog)
        entries[f"{name}.graph.json"] = [dump_json(encode_graph(prog.graph))]
        entries.update({f"{name}.{part}": [code[key]] for part, key in PARTS.items() if key is not None})
    fields = {
        "layers": package.graphs.layers,
        "max_batch": package.max_batch,
        "max_positions": package.max_positions,
        "target": target,
        "compiler_version": COMPILER_VERSION,
        "signatures": {name: signature(prog.graph) for name, prog in programs.items()},
    }
    if package.paged is not None:
        fields["block_size"] = package.block_size
    if package.lora is not None:
        fields["lora"] = package.lora.to_json()
        if package.adapters:
            entries[LORA_ENTRY] = [encode_adapters(package.adapters)]
    fmt = FORMAT if package.paged is None else FORMAT_V3 if package.chunk is None else FORMAT_V4
    write_bundle(fmt, out_path, {**entries, **text_entries(package)}, fields)


def load_language_model(path: Path, keep_weights: bool = False, compute: ComputeThread | None = None) -> LanguageModel:
    """The model at `path`, its programs prepared (their CPU programs prepared and run on `compute`, where given).
    Weights the CPU programs read only as packed GEMM panels are let go (resident_weights.py) unless
    `keep_weights`: then the programs can still be saved again."""
    block_size = None
    manifest, raw = _read_any(path)
    if manifest["format_version"] == FORMAT_V1.version:
        programs = {"prefill": load_program(bytes(raw.pop(V1_PREFILL))), "step": load_program(bytes(raw.pop(V1_STEP)))}
    else:
        chunked = manifest["format_version"] == FORMAT_V4.version
        programs = _programs(manifest, raw, CHUNKED_PROGRAMS if chunked else PROGRAMS)
        if manifest["format_version"] in (FORMAT_V3.version, FORMAT_V4.version):
            block_size = _block_size(manifest, programs["step"].graph)
            if chunked:
                _block_size(manifest, programs["chunk"].graph)
    sizes = _sizes(manifest)
    codec = _codec(raw)
    loaded = {name: LoadedProgram(program, compute) for name, program in programs.items()}  # prepared
    if not keep_weights:
        release_packed_weights(list(programs.values()))  # packed into panels: the floats are not read again
    prefill, step = (loaded[p] for p in PROGRAMS)
    chunk = loaded.get("chunk")
    lora = _lora_bank(manifest, raw, programs["step"].graph)
    return LanguageModel(prefill, step, codec, *sizes, block_size, chunk, lora)


def _lora_bank(manifest: dict[str, Any], raw: dict[str, bytearray], step: lm.Graph) -> LoraBank | None:
    """The bank of a model compiled with LoRA stacks, its deployed adapters installed; None without."""
    if manifest.get("lora") is None:
        return None
    try:
        layout = LoraLayout.from_json(manifest["lora"])
        return bank_for(layout, step, decode_adapters(raw.pop(LORA_ENTRY, None)))
    except (KeyError, TypeError, ValueError) as e:
        raise ArtifactError(f"LoRA: {e}") from None


def load_serving_text(path: Path) -> tuple[TextCodec, int]:
    """The codec and the context length (max_positions) of the model at `path`, read without its programs or
    weights: what a gateway needs to tokenize requests and check their lengths."""
    manifest, raw = _read_any(path, frozenset(TEXT_CAPS))
    return _codec(raw), _sizes(manifest)[2]


def _read_any(path: Path, only: frozenset[str] | None = None) -> tuple[dict[str, Any], dict[str, bytearray]]:
    """Format 4, 3 or 2 (`_read_newest`), else format 1; when none reads, the newer formats' error."""
    try:
        return _read_newest(path, only)
    except ArtifactError as error:
        try:  # compiled before the weights were stored once? (its entries are refused before any data is read)
            return read_bundle(FORMAT_V1, path, only)
        except ArtifactError:
            raise error from None


def _sizes(manifest: dict[str, Any]) -> list[int]:
    """layers, max_batch and max_positions, checked."""
    sizes = [manifest.get(k) for k in ("layers", "max_batch", "max_positions")]
    if not all(type(v) is int and v > 0 for v in sizes):
        raise ArtifactError("manifest: layers, max_batch and max_positions must be positive integers")
    return sizes


def _codec(raw: dict[str, bytearray]) -> TextCodec:
    """The tokenizer, its special tokens and chat template, from the file's text entries."""
    objects: dict[str, Any] = {
        n: parse_json(bytes(raw[n]), n) if n in raw else {} for n in (CONFIG, TOKENIZER_CONFIG, GENERATION_CONFIG)
    }
    template = bytes(raw[CHAT_TEMPLATE]).decode("utf-8") if CHAT_TEMPLATE in raw else None
    return TextCodec.of(
        bytes(raw[TOKENIZER]).decode("utf-8"),
        objects[TOKENIZER_CONFIG],
        template,
        objects[CONFIG],
        objects[GENERATION_CONFIG],
    )


def _read_newest(path: Path, only: frozenset[str] | None = None) -> tuple[dict[str, Any], dict[str, bytearray]]:
    """Format 4 (a paged step and chunk), 3 (a paged step) or 2, the first that reads. When none does, the
    error of the format the file names (the others only say its version is not theirs)."""
    errors = []
    for fmt in (FORMAT_V4, FORMAT_V3, FORMAT):
        try:
            return read_bundle(fmt, path, only)
        except ArtifactError as e:
            errors.append(e)
    raise next((e for e in errors if not str(e).startswith("unsupported format version")), errors[0])


def _block_size(manifest: dict[str, Any], step: lm.Graph) -> int:
    size = manifest.get("block_size")
    pool = step.inputs.get("pool.0.key")
    if type(size) is not int or pool is None or step.nodes[pool].shape[2] != size:
        raise ArtifactError(f"manifest: block_size {size!r:.40} disagrees with the paged programs' pools")
    return size


def _programs(
    manifest: dict[str, Any], raw: dict[str, bytearray], names: tuple[str, ...]
) -> dict[str, CompiledProgram]:
    """The programs `names` of a format 2 to 4 file, all bound to the one copy of the weights; checked as a
    `.lprog` is."""
    if manifest.get("compiler_version") != COMPILER_VERSION:
        raise ArtifactError(
            f"compiled by compiler version {manifest.get('compiler_version')!r:.60}, this is {COMPILER_VERSION}: "
            "recompile"
        )
    target, signatures = manifest.get("target"), manifest.get("signatures")
    if target not in TARGETS:
        raise ArtifactError(f"manifest: target {target!r:.40} is not one of {TARGETS}")
    if not isinstance(signatures, dict) or set(signatures) != set(names):
        raise ArtifactError(f"manifest: signatures must name exactly {names}")
    graphs = {}
    for name in names:
        try:
            graph = decode_graph(parse_json(bytes(raw.pop(f"{name}.graph.json")), f"{name}.graph.json"))
            apply_manifest_padding(graph, signatures[name])
        except (GraphFileError, PaddingError) as e:
            raise ArtifactError(f"{name}.graph.json: {e}") from None
        if signature(graph) != signatures[name]:
            raise ArtifactError(f"the manifest's {name} signature disagrees with {name}.graph.json")
        graphs[name] = graph
    try:
        arrays = read_safetensors(raw.pop(WEIGHTS))
    except GraphFileError as e:
        raise ArtifactError(str(e)) from None
    bind_shared(graphs, arrays)
    return {
        name: program_from_entries(
            graph, target, {key: raw.pop(f"{name}.{part}") for part, key in PARTS.items() if key is not None}
        )  # fmt: skip
        for name, graph in graphs.items()
    }
