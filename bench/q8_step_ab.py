"""A/B of one compiled paged decode step's GEMM time, in one process: the step of bench/step_kernels.py (same
random-weight Llama, `--rows`, `--quantize`) compiled and built twice, A by the Q8_0 code generators of git revision
`--against` (default main: compiler/cpu/codegen_w8a8.py and codegen_qgemm.py as that revision has them), B by this
tree's with `--flags` added to the C flags (the library cache is keyed by source and flags); the two run in
alternating blocks; per block, each call's minimum, summed over the GEMM calls (weights read) and over all calls;
medians over the blocks. `python bench/q8_step_ab.py [--against REV] [--flags "-DFLAG"] [--rows N]
[--quantize int8|w8a8] [--blocks N] [--repeats N]`."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from kernel_clock import timed_executable, timed_runs  # noqa: E402
from llm import write_folder  # noqa: E402
from paged_step import feeds, step_arguments  # noqa: E402
from step_kernels import gemm_weight_bytes  # noqa: E402

import luminal as lm  # noqa: E402
from luminal.llm_package import build_package  # noqa: E402
from luminal.nn.models.paged_decoding import pool_name  # noqa: E402
from luminal.quantize import QUANTIZATIONS  # noqa: E402
from luminal.runtime import cpu  # noqa: E402

GENERATORS = ("codegen_w8a8", "codegen_qgemm")  # in import order: the second reads the first's PRELUDE


@contextlib.contextmanager
def generators_of(revision: str):
    """The Q8_0 code generators as `revision` has them (every top-level name of its modules set on the live ones)."""
    saved = []
    for name in GENERATORS:
        live = sys.modules[f"luminal.compiler.cpu.{name}"]
        text = subprocess.run(
            ["git", "show", f"{revision}:compiler/cpu/{name}.py"], check=True, capture_output=True, text=True
        ).stdout
        old = types.ModuleType(live.__name__)
        old.__dict__["__name__"] = live.__name__
        exec(compile(text, f"{revision}:{name}.py", "exec"), old.__dict__)
        saved.append((live, dict(live.__dict__)))
        for key, value in old.__dict__.items():
            if not key.startswith("__"):
                setattr(live, key, value)
    try:
        yield
    finally:
        for live, attrs in saved:
            live.__dict__.update(attrs)


def main() -> None:
    parser = step_arguments(layers=12, hidden=768, past=48)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--quantize", choices=QUANTIZATIONS, default="w8a8")
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--against", default="main")
    parser.add_argument("--flags", default="")
    args = parser.parse_args()
    args.vocab, args.prompt, args.new_tokens = 32000, args.past, 64
    with tempfile.TemporaryDirectory() as tmp:
        write_folder(Path(tmp), args)
        package = build_package(Path(tmp), max_batch=16, quantize=args.quantize)
    flags = args.flags.split()
    import luminal.compiler.cpu.codegen_qgemm  # noqa: F401  (both generators loaded, to be swapped)

    with generators_of(args.against):
        old = lm.compile(package.paged, target="cpu", cache=False)
    program = lm.compile(package.paged, target="cpu", cache=False)
    weights = np.array(gemm_weight_bytes(program.kernels), float)
    pool = package.paged.nodes[package.paged.inputs[pool_name(0, "key")]].shape
    feed, _ = feeds(args.layers, int(pool[1]), int(pool[3]), args.rows, args.past, np.random.default_rng(0))
    base, builds = list(cpu.CFLAGS), {}
    for name, extra, compiled in (("A", [], old), ("B", flags, program)):
        cpu.CFLAGS = base + extra
        builds[name] = timed_executable(compiled)
    cpu.CFLAGS = base
    outs = {n: builds[n][0].run(feed) for n in "AB"}
    diff = max(float(np.abs(np.asarray(outs["A"][k]) - np.asarray(outs["B"][k])).max()) for k in outs["A"])
    gemm, total, wall, each = ({"A": [], "B": []} for _ in range(4))
    for block in range(args.blocks):
        for n in "AB" if block % 2 == 0 else "BA":
            exe, seconds, functions = builds[n]
            exe.run(feed)
            least, walls = timed_runs(exe, feed, seconds, args.repeats)
            gemm[n].append(least[weights > 0].sum() * 1e3)
            each[n].append(least * 1e3)
            total[n].append(least.sum() * 1e3)
            wall[n].append(np.median(walls) * 1e3)
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"{args.quantize}, {args.rows} rows, A = {args.against}, B = this tree {' '.join(flags)}; load {load}; "
          f"max |A - B| {diff:.3g}; sources differ: {old.source != program.source}")  # fmt: skip
    for n in "AB":
        g = np.median(gemm[n])
        print(f"  {n}: GEMMs {g:.2f} ms ({weights.sum() / g / 1e6:.1f} GB/s), all calls {np.median(total[n]):.2f} ms,"
              f" wall {np.median(wall[n]):.2f} ms")  # fmt: skip
    print(f"  B/A GEMMs {np.median(gemm['B']) / np.median(gemm['A']):.3f}")
    per = {n: {} for n in "AB"}  # function -> (summed median ms, weight bytes)
    for n in "AB":
        for f, t, w in zip(builds[n][2], np.median(each[n], axis=0), weights):
            if w:
                ms, read = per[n].get(f, (0.0, 0.0))
                per[n][f] = (ms + t, read + w)
    for f, (ms, read) in sorted(per["A"].items(), key=lambda item: -item[1][0])[:6]:
        b = per["B"].get(f, (np.nan, read))[0]
        rates = f"({read / ms / 1e6:5.1f} GB/s)  B {b:7.3f} ms ({read / b / 1e6:5.1f} GB/s)"
        print(f"  {f:8s} {shape(program.source, f):22s} A {ms:7.3f} ms {rates}")


def shape(source: str, function: str) -> str:
    """N x K of a GEMM function of the generated C, as its lm_N and lm_K lines say."""
    body = source[source.index(f"static int {function}(") :]
    body = body[: body.index("\nstatic int ") if "\nstatic int " in body else len(body)]
    n, k = re.search(r"lm_N = ([^;]*);", body), re.search(r"lm_K = ([^,;]*)", body)
    return f"N {n.group(1) if n else '?'} K {k.group(1) if k else '?'}"


if __name__ == "__main__":
    main()
