"""Single layers compiled for the CPU against PyTorch eager, measured side by side in one run.

    .venv/bin/python bench/layers.py [--activations-only | --convs-only]

- A linear layer (128 x 384 -> 1024) followed by each activation of luminal.functional that models use: how many
  kernels it became (1: the activation runs in the GEMM's epilogue), and the compiled time against torch's.
- 2-D convolutions (batch 1, 3x3 and 1x1, ResNet-like channel counts and sizes) with bias and ReLU.

Outputs are compared with torch before timing; compiled and torch runs alternate within each repeat (the
machine is shared: both see the same load) and medians are printed, with the ratio compiled/torch.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import interleaved_ms  # noqa: E402

import luminal as lm  # noqa: E402
import luminal.functional as F  # noqa: E402
from luminal.compiler import codegen_gemm  # noqa: E402

ACTIVATIONS = ["relu", "gelu", "silu", "leaky_relu", "hardswish", "relu6", "hardtanh", "elu", "selu", "celu"]
ACTIVATIONS += ["softplus", "mish", "tanh", "sigmoid"]
CONVS = [(64, 56, 3), (128, 28, 3), (256, 14, 3), (64, 56, 1)]  # (channels in and out, height = width, kernel)
RNG = np.random.default_rng(0)


def _compare(name: str, prog, feed: dict, theirs) -> str:
    """One table row: `prog` on `feed` against the torch call `theirs`, checked equal first, then timed."""
    with torch.no_grad():
        got, want = prog.run(feed)["y"], theirs().numpy()
        error = float(np.max(np.abs(got - want)))
        if error > 1e-3 * max(1.0, float(np.max(np.abs(want)))):
            raise SystemExit(f"{name}: compiled output differs from torch by {error:.2e}")
        times = interleaved_ms({"ours": partial(prog.run, feed), "torch": theirs}, repeats=30)
    kernels = prog.kernels.kernels
    gemms = sum(codegen_gemm.plan(k) is not None for k in kernels)
    ours, torch_ms = times["ours"], times["torch"]
    return f"{name:30s} {len(kernels):7d} {gemms:5d} {ours:11.3f} {torch_ms:8.3f} {ours / torch_ms:11.2f}x"


def _header() -> None:
    print(f"{'layer':30s} {'kernels':>7s} {'gemms':>5s} {'compiled ms':>11s} {'torch ms':>8s} {'comp/torch':>12s}")


def _torch_linear(activation, x, weight, bias):
    return activation(torch.nn.functional.linear(x, weight, bias))


def _torch_conv(x, weight, bias, padding: int):
    return torch.relu(torch.nn.functional.conv2d(x, weight, bias, padding=padding))


def activations() -> None:
    rows, dim, out = 128, 384, 1024
    weight = (RNG.standard_normal((out, dim)) / np.sqrt(dim)).astype(np.float32)
    bias = RNG.standard_normal(out).astype(np.float32)
    x = (RNG.standard_normal((rows, dim)) * 3).astype(np.float32)
    tensors = [torch.from_numpy(a) for a in (x, weight, bias)]
    _header()
    for name in ["none", *ACTIVATIONS]:
        g = lm.Graph()
        y = F.linear(g.input("x", (rows, dim)), g.weight("w", (out, dim)), g.weight("b", (out,)))
        g.bind({"w": weight, "b": bias})
        (y if name == "none" else getattr(F, name)(y)).output("y")
        prog = lm.compile(g, "cpu", cache=False)
        act = torch.nn.Identity() if name == "none" else getattr(torch.nn.functional, name, getattr(torch, name, None))
        theirs = partial(_torch_linear, act, *tensors)
        print(_compare(f"linear {dim}->{out} + {name}", prog, {"x": x}, theirs), flush=True)


def convs() -> None:
    _header()
    for channels, size, k in CONVS:
        weight = (RNG.standard_normal((channels, channels, k, k)) / np.sqrt(channels * k * k)).astype(np.float32)
        bias = RNG.standard_normal(channels).astype(np.float32)
        x = RNG.standard_normal((1, channels, size, size)).astype(np.float32)
        g = lm.Graph()
        y = F.conv2d(g.input("x", x.shape), g.weight("w", weight.shape), g.weight("b", bias.shape), padding=k // 2)
        F.relu(y).output("y")
        g.bind({"w": weight, "b": bias})
        prog = lm.compile(g, "cpu", cache=False)
        theirs = partial(_torch_conv, *(torch.from_numpy(a) for a in (x, weight, bias)), k // 2)
        print(_compare(f"conv {k}x{k} c{channels} {size}x{size} +relu", prog, {"x": x}, theirs), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--activations-only", action="store_true")
    parser.add_argument("--convs-only", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(2)
    if not args.convs_only:
        activations()
    if not args.activations_only:
        convs()


if __name__ == "__main__":
    main()
