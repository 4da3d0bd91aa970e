"""The compiled CPU encoder against the runtimes a user would pick instead, at the shapes issue 47 names.

    .venv/bin/python bench/encoder_peers.py [--repeats N] [--shapes 1x32,1x128,8x128] [--no-bf16]

The model is the 6-layer MiniLM-shaped encoder of bench/blocks.py (dim 384, 12 heads, ffn 1536, random
weights). Each shape is compiled on its own (the sequence is static; the batch is a symbol) and run by: luminal
(`lm.compile(target="cpu")`), PyTorch eager, `torch.compile` (default inductor, static shapes) and ONNX Runtime
(the eager module exported by `torch.onnx.export`, all graph optimisations, as many intra-op threads as torch).
Every runner's output is checked against eager before it is timed. Each runner is timed in its own block (warm-up,
then `--repeats` calls, median), one after another; the load average is printed before and after each shape, so a
row measured under load can be told apart. Ratios are the peer's median over luminal's: above 1 luminal is faster.

bf16 (unless --no-bf16): luminal on bf16 weights and input against torch eager under bf16 autocast (the kernels
oneDNN picks: AMX or AVX-512 BF16 where the CPU has them), each with its largest error against float32 math on
the same bf16 values; or the reason luminal cannot compile it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from blocks import MINILM, block_weights, luminal_block, torch_block  # noqa: E402
from machine import cpu_model  # noqa: E402

import luminal as lm  # noqa: E402

LAYERS = 6
TOLERANCE = 1e-3  # float32 against eager: summation orders differ across six layers


def block_ms(fn: Callable[[], object], repeats: int, warmup: int = 3) -> float:
    """Median milliseconds of `fn`, timed alone: warm-up calls, then `repeats` calls back to back."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def cpu_features() -> str:
    """The ISA extensions the kernels could use, as /proc/cpuinfo reports them."""
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
    return " ".join(f for f in wanted if f in flags) or "none of " + ",".join(wanted)


def load() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def _module_class():
    import torch

    class Encoder(torch.nn.Module):
        """An eager function as a module: torch.compile and the ONNX export take one."""

        def __init__(self, forward):
            super().__init__()
            self.fn = forward

        def forward(self, x):
            return self.fn(x)

    return Encoder


def onnx_session(module, example, threads: int):
    """An ONNX Runtime session of `module` exported at `example`'s shape."""
    import onnxruntime as ort
    import torch

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "encoder.onnx")
        with warnings.catch_warnings():  # the TorchScript exporter's deprecation: it still exports a static graph
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(module, (example,), path, input_names=["x"], output_names=["y"], dynamo=False)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def float32_rows(shapes: list[tuple[int, int]], repeats: int) -> None:
    import torch

    threads = torch.get_num_threads()
    weights = block_weights(MINILM)
    Encoder = _module_class()
    print(f"{'shape':<10} {'luminal':>9} {'eager':>9} {'compile':>9} {'ORT':>9}   ratios (peer / luminal)")
    for seq in sorted({s for _, s in shapes}):
        cfg = replace(MINILM, seq=seq)
        program = lm.compile(luminal_block(cfg, weights, layers=LAYERS), target="cpu")
        eager = torch_block(cfg, weights, layers=LAYERS)

        module = Encoder(eager).eval()
        compiled = torch.compile(module)
        for batch in [b for b, s in shapes if s == seq]:
            x = np.random.default_rng(batch * 1000 + seq).standard_normal((batch, seq, cfg.dim)).astype(np.float32)
            tx = torch.from_numpy(x)
            session = onnx_session(module, tx, threads)
            with torch.inference_mode():
                runners = {
                    "luminal": lambda p=program, x=x: p.run({"x": x})["y"],
                    "eager": lambda f=eager, t=tx: f(t).numpy(),
                    "compile": lambda f=compiled, t=tx: f(t).numpy(),
                    "ORT": lambda s=session, x=x: s.run(["y"], {"x": x})[0],
                }
                want = runners["eager"]()
                for name, run in runners.items():
                    np.testing.assert_allclose(run(), want, rtol=TOLERANCE, atol=TOLERANCE, err_msg=name)
                before = load()
                ms = {name: block_ms(run, repeats) for name, run in runners.items()}
            ratios = "  ".join(f"{n} {ms[n] / ms['luminal']:.2f}x" for n in ("eager", "compile", "ORT"))
            best = min(ms[n] for n in ("eager", "compile", "ORT"))
            print(
                f"{batch}x{seq:<8} {ms['luminal']:>9.2f} {ms['eager']:>9.2f} {ms['compile']:>9.2f} {ms['ORT']:>9.2f}"
                f"   {ratios}  best peer {best / ms['luminal']:.2f}x  ({before} -> {load()})"
            )


def bf16_rows(shapes: list[tuple[int, int]], repeats: int) -> None:
    import ml_dtypes
    import torch

    weights = {k: v.astype(ml_dtypes.bfloat16) for k, v in block_weights(MINILM).items()}
    for seq in sorted({s for _, s in shapes}):
        cfg = replace(MINILM, seq=seq)
        eager = torch_block(cfg, {k: v.astype(np.float32) for k, v in weights.items()}, layers=LAYERS)
        try:
            program = lm.compile(luminal_block(cfg, weights, layers=LAYERS), target="cpu")
        except Exception as e:  # say why, and still print torch's row
            program, reason = None, f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        for batch in [b for b, s in shapes if s == seq]:
            x = np.random.default_rng(batch * 1000 + seq).standard_normal((batch, seq, cfg.dim))
            tx = torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
            with torch.inference_mode():
                exact = eager(tx.float()).numpy()  # float32 math on the same bf16 values: what both round from
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    theirs = eager(tx).float().numpy()
                    torch_ms = block_ms(lambda f=eager, t=tx: f(t), repeats)
            torch_err = float(np.abs(theirs - exact).max())
            if program is None:
                print(f"bf16 {batch}x{seq}: torch eager {torch_ms:.2f} ms (max |error| {torch_err:.3f}); "
                      f"luminal cannot compile it ({reason})")  # fmt: skip
                continue
            xb = x.astype(ml_dtypes.bfloat16)
            ours_err = float(np.abs(program.run({"x": xb})["y"].astype(np.float32) - exact).max())
            ours = block_ms(lambda p=program, x=xb: p.run({"x": x}), repeats)
            print(
                f"bf16 {batch}x{seq}: luminal {ours:.2f} ms (max |error| {ours_err:.3f}), torch eager autocast "
                f"{torch_ms:.2f} ms (max |error| {torch_err:.3f}), {torch_ms / ours:.2f}x  ({load()})"
            )


def parse_shapes(text: str) -> list[tuple[int, int]]:
    return [tuple(int(v) for v in item.split("x")) for item in text.split(",")]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--shapes", type=parse_shapes, default=parse_shapes("1x32,1x128,8x128"), help="BxS list")
    parser.add_argument("--no-bf16", action="store_true")
    args = parser.parse_args()
    import torch

    print(f"{cpu_model()}; {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}; {cpu_features()}")
    print(f"torch {torch.__version__}; {load()}")
    float32_rows(args.shapes, args.repeats)
    if not args.no_bf16:
        bf16_rows(args.shapes, args.repeats)
