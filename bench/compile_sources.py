"""The generated sources of the test models, written to a folder with their sha256 list, to compare two trees.

    .venv/bin/python bench/compile_sources.py OUT_DIR [--targets cpu,h100,m2]

Models (tiny, random weights, the compiler tests' own builders): a MiniLM-shaped BERT encoder, a one-layer GPT-2,
a Llama prefill (float32 and bf16), a Llama decode step (float32, bf16) and a paged bf16 decode step. Each is
compiled for each target without the compile cache, and its source (C, CUDA C++ or MSL) is written as
`OUT_DIR/<model>.<target>.<ext>`; `OUT_DIR/SHA256SUMS` lists them (`sha256sum -c` reads it) and
`OUT_DIR/times.txt` the compile seconds, `OUT_DIR/choices.txt` each compile's candidates with their estimated
costs, the chosen one marked `*`. A refactoring that must not change the output is checked with `diff -r before
after` (the times aside); where a source differs, choices.txt says which choice changed and at what estimate.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the compiler tests' model builders live under tests/

import luminal as lm  # noqa: E402
from luminal.compiler.analysis.targets import get_target  # noqa: E402
from tests.compiler.cuda.graphs import gpt2  # noqa: E402
from tests.compiler.metal.models import (  # noqa: E402
    llama_decode,
    llama_decode_bf16,
    llama_prefill,
    llama_prefill_bf16,
    minilm,
    paged_step,
)

EXTENSIONS = {"cpu": "c", "cuda": "cu", "metal": "metal"}


def models():
    """(name, graph) of each test model; each builder makes a fresh graph with the same random weights."""
    for build in (minilm, gpt2, llama_prefill, llama_prefill_bf16, llama_decode, llama_decode_bf16):
        yield build.__name__, build()[0]
    yield "paged_step", paged_step()


def main(out: Path, targets: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    sums, times, choices = [], [], []
    for name, graph in models():
        for target in targets:
            start = time.perf_counter()
            prog = lm.compile(graph, target, cache=False)
            seconds, source = time.perf_counter() - start, prog.source
            choices += [f"{name} {target}", *candidate_lines(prog.report), ""]
            path = out / f"{name}.{target}.{EXTENSIONS[get_target(target).kind]}"
            path.write_text(source)
            sums.append(f"{hashlib.sha256(source.encode()).hexdigest()}  {path.name}")
            times.append(f"{name} {target} {seconds:.2f}")
            print(times[-1], flush=True)
    (out / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    (out / "times.txt").write_text("\n".join(times) + "\n")
    (out / "choices.txt").write_text("\n".join(choices))


def candidate_lines(report: dict) -> list[str]:
    """One line per ranked candidate: its name (`*` where chosen), estimated seconds and what else its row
    reports (launches, resident bytes...), duplicates left out."""
    lines = []
    for row in report["candidates"]:
        if "same_as" in row:
            continue
        mark = "*" if row["name"] == report["choice"] else " "
        extra = {k: v for k, v in row.items() if k not in ("name", "estimated_s", "fusion", "source_sha256")}
        lines.append(f" {mark} {row['name']}: {row['estimated_s'] * 1e6:.3f} us {extra}")
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--targets", default="cpu,h100,m2")
    args = parser.parse_args()
    main(args.out, args.targets.split(","))
