"""A deployed language model: its LLM package compiled for a target (`.llmprog`, a bundle of the prefill and
decode-step programs with the package's tokenizer files), and that file loaded back for serving.

The compiled programs each carry the weights (a `.lprog` is self-contained); the upload carries them once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import luminal as lm
from luminal.compiler.artifact import load_program, program_to_bytes
from luminal.compiler.artifact_json import ArtifactError
from luminal.graph_json import parse_json
from luminal.llm_package import (
    CHAT_TEMPLATE,
    CONFIG,
    GENERATION_CONFIG,
    TOKENIZER,
    TOKENIZER_CONFIG,
    load_package,
    text_entries,
)
from luminal.scheduler.generation.tokenizer import TextCodec
from luminal.scheduler.programs import LoadedProgram
from luminal.zip_bundle import BundleFormat, read_bundle, write_bundle

PREFILL, STEP = "prefill.lprog", "step.lprog"
MiB, GiB = 1 << 20, 1 << 30
FORMAT = BundleFormat(
    name="luminal.llmprog",
    version=1,
    caps={
        PREFILL: 66 * GiB,  # a program holds its graph with every weight
        STEP: 66 * GiB,
        CONFIG: 1 * MiB,
        TOKENIZER: 64 * MiB,
        TOKENIZER_CONFIG: 16 * MiB,
        CHAT_TEMPLATE: 1 * MiB,
        GENERATION_CONFIG: 1 * MiB,
    },
    required=frozenset({PREFILL, STEP, CONFIG, TOKENIZER}),
    error=ArtifactError,
    stored=frozenset({PREFILL, STEP}),
)


@dataclass
class LanguageModel:
    prefill: LoadedProgram
    step: LoadedProgram
    codec: TextCodec
    layers: int
    max_batch: int  # rows one decode step takes (the graphs' batch symbol)
    max_positions: int  # prompt plus generated tokens of one sequence


def compile_package(package_path: Path, target: str, out_path: Path) -> None:
    """Compile an uploaded LLM package's prefill and step graphs for `target` and write the `.llmprog`."""
    package = load_package(package_path)
    entries = {
        PREFILL: [program_to_bytes(lm.compile(package.graphs.prefill, target=target))],
        STEP: [program_to_bytes(lm.compile(package.graphs.step, target=target))],
        **text_entries(package),
    }
    fields = {"layers": package.graphs.layers, "max_batch": package.max_batch, "max_positions": package.max_positions}
    write_bundle(FORMAT, out_path, entries, {**fields, "target": target})


def load_language_model(path: Path) -> LanguageModel:
    manifest, raw = read_bundle(FORMAT, path)
    sizes = [manifest.get(k) for k in ("layers", "max_batch", "max_positions")]
    if not all(type(v) is int and v > 0 for v in sizes):
        raise ArtifactError("manifest: layers, max_batch and max_positions must be positive integers")
    objects: dict[str, Any] = {
        n: parse_json(bytes(raw[n]), n) if n in raw else {} for n in (CONFIG, TOKENIZER_CONFIG, GENERATION_CONFIG)
    }
    template = bytes(raw[CHAT_TEMPLATE]).decode("utf-8") if CHAT_TEMPLATE in raw else None
    codec = TextCodec.of(
        bytes(raw[TOKENIZER]).decode("utf-8"),
        objects[TOKENIZER_CONFIG],
        template,
        objects[CONFIG],
        objects[GENERATION_CONFIG],
    )
    prefill = LoadedProgram(load_program(bytes(raw.pop(PREFILL))).prepare())
    step = LoadedProgram(load_program(bytes(raw.pop(STEP))).prepare())
    return LanguageModel(prefill, step, codec, *sizes)
