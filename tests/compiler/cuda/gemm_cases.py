"""GEMMs that cuBLAS can compute alone (compiler/cuda/library_gemm.py), one per way its call is shaped: batched,
operands read transposed or as stored, a symbolic M, half operands with a half or a float32 output; with their
inputs. The cuBLAS tests compile them with gemm_library="always" whatever their size."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import luminal as lm
import luminal.functional as F
from tests.compiler.cuda.graphs import Case, bind_random


def _floats(rng, *shape, dtype=np.float32) -> np.ndarray:
    return (rng.standard_normal(shape) * 0.5).astype(np.float32).astype(dtype)


def batched() -> Case:
    """[6, 70, 40] @ [6, 40, 90], float32: strided batched, both operands as stored."""
    g, rng = lm.Graph(), np.random.default_rng(21)
    (g.input("a", (6, 70, 40)) @ g.input("b", (6, 40, 90))).output("y")
    return g, {"a": _floats(rng, 6, 70, 40), "b": _floats(rng, 6, 40, 90)}


def linear_bf16() -> Case:
    """A bf16 linear layer of [out, in] weight over a symbolic number of rows: the weight read transposed, M
    symbolic (a graph captured for a bucket computes its extra rows), a bf16 output."""
    g, rng = lm.Graph(), np.random.default_rng(22)
    x = g.input("x", (lm.sym("rows", max=64), 128), lm.bfloat16)
    F.linear(x, g.weight("w", (96, 128), lm.bfloat16)).output("y")
    return bind_random(g), {"x": _floats(rng, 37, 128, dtype=ml_dtypes.bfloat16)}


def half_to_float() -> Case:
    """fp16 operands, a float32 product: cuBLAS reads fp16 and writes float32."""
    g, rng = lm.Graph(), np.random.default_rng(23)
    a, b = g.input("a", (80, 64), lm.float16), g.input("b", (64, 72), lm.float16)
    (F.cast(a, lm.float32) @ F.cast(b, lm.float32)).output("y")
    return g, {"a": _floats(rng, 80, 64, dtype=np.float16), "b": _floats(rng, 64, 72, dtype=np.float16)}


def transposed() -> Case:
    """a^T @ b with a stored [k, m]: the first operand read transposed along its stored rows."""
    g, rng = lm.Graph(), np.random.default_rng(24)
    (F.t(g.input("a", (48, 70))) @ g.input("b", (48, 66))).output("y")
    return g, {"a": _floats(rng, 48, 70), "b": _floats(rng, 48, 66)}


def sliced() -> Case:
    """a[:, 8:] @ b: the first operand starts 8 elements into its buffer, its rows 56 apart."""
    g, rng = lm.Graph(), np.random.default_rng(25)
    (g.input("a", (70, 56))[:, 8:] @ g.input("b", (48, 66))).output("y")
    return g, {"a": _floats(rng, 70, 56), "b": _floats(rng, 48, 66)}


def two_symbolic_rows() -> Case:
    """[batch, seq, 64] @ [64, 80] with batch and seq symbolic: M flattens (batch, seq), the outer axis's stride
    64 * seq symbolic; at a bucket's dims the live rows are the first rows of the flattened M."""
    g, rng = lm.Graph(), np.random.default_rng(26)
    x = g.input("x", (lm.sym("batch", max=4), lm.sym("seq", max=16), 64))
    (x @ g.input("w", (64, 80))).output("y")
    return g, {"x": _floats(rng, 3, 5, 64), "w": _floats(rng, 64, 80)}


GEMMS = {
    "batched": batched,
    "linear_bf16": linear_bf16,
    "half_to_float": half_to_float,
    "transposed": transposed,
    "sliced": sliced,
    "two_symbolic_rows": two_symbolic_rows,
}
