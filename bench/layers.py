"""Single layers compiled for the CPU against PyTorch eager, measured side by side in one run.

    .venv/bin/python bench/layers.py [--activations-only | --convs-only | --quantized-only]

- A linear layer (128 x 384 -> 1024) followed by each activation of luminal.functional that models use: how many
  kernels it became (1: the activation runs in the GEMM's epilogue), and the compiled time against torch's.
- 2-D convolutions (batch 1, 3x3 and 1x1, ResNet-like channel counts and sizes) with bias and ReLU.
- A quantized linear (ONNX Runtime's quantize_dynamic: DynamicQuantizeLinear + MatMulInteger, whose int8 x uint8
  matmul compiles to the integer GEMM, compiler/cpu/int_gemm.py) against ONNX Runtime on the same file, and against
  the float linear it was quantized from, compiled (the float GEMM).

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
from luminal.compiler.cpu import codegen_gemm  # noqa: E402

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


def _quantized_files(rows: int, dim: int, out: int, folder: Path) -> tuple[str, str]:
    """A bias-free linear exported to ONNX, and ONNX Runtime's dynamic quantization of it (int8 weights)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    torch.manual_seed(0)
    model = torch.nn.Linear(dim, out, bias=False).eval()
    float_path, quantized_path = str(folder / "linear.onnx"), str(folder / "linear_int8.onnx")
    torch.onnx.export(model, (torch.zeros(rows, dim),), float_path, input_names=["x"], output_names=["y"], dynamo=False)
    quantize_dynamic(float_path, quantized_path, weight_type=QuantType.QInt8)
    return float_path, quantized_path


def quantized() -> None:
    import tempfile

    import onnxruntime as ort

    from luminal.compiler.analysis import int_gemm_plan

    print(f"{'quantized linear':30s} {'kernels':>7s} {'int gemms':>9s} {'int8 ms':>8s} {'ORT ms':>8s} {'float ms':>8s}"
          f" {'int8/ORT':>9s} {'int8/float':>11s} {'max |ours - ORT|':>17s}")  # fmt: skip
    for rows, dim, out in [(1, 768, 2048), (128, 384, 1024), (512, 768, 768)]:
        with tempfile.TemporaryDirectory() as folder:
            float_path, quantized_path = _quantized_files(rows, dim, out, Path(folder))
            graph = lm.onnx.load(quantized_path)
            ours = lm.compile(graph, "cpu", cache=False)
            plain = lm.compile(lm.onnx.load(float_path), "cpu", cache=False)
            options = ort.SessionOptions()
            options.intra_op_num_threads = 2
            # Its threads would otherwise spin after each run, taking the cores from the runs interleaved with it.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = ort.InferenceSession(quantized_path, options, providers=["CPUExecutionProvider"])
        x = RNG.standard_normal((rows, dim)).astype(np.float32)
        feed = {"x": x}
        got = ours.run(feed)["y"]
        if not np.allclose(got, lm.run(graph, feed)["y"], rtol=0, atol=1e-5):
            raise SystemExit(f"quantized linear {rows}x{dim}->{out}: compiled differs from the interpreter")
        # ONNX Runtime's own rounding of x / scale may put an activation one quantization step apart.
        error = float(np.max(np.abs(got - session.run(None, feed)[0])))
        times = interleaved_ms(
            {
                "int8": partial(ours.run, feed),
                "ort": partial(session.run, None, feed),
                "float": partial(plain.run, feed),
            },
            repeats=30,
        )
        gemms = sum(int_gemm_plan.plan(k) is not None for k in ours.kernels.kernels)
        i8, anchor, f32 = times["int8"], times["ort"], times["float"]
        name = f"{rows}x{dim} -> {out}"
        print(f"{name:30s} {len(ours.kernels.kernels):7d} {gemms:9d} {i8:8.3f} {anchor:8.3f} {f32:8.3f}"
              f" {i8 / anchor:8.2f}x {i8 / f32:10.2f}x {error:17.2e}", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--activations-only", action="store_true")
    parser.add_argument("--convs-only", action="store_true")
    parser.add_argument("--quantized-only", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(2)
    if args.quantized_only:
        quantized()
        return
    if not args.convs_only:
        activations()
    if not args.activations_only:
        convs()
    if not (args.activations_only or args.convs_only):
        quantized()


if __name__ == "__main__":
    main()
