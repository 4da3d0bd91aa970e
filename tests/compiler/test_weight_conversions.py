"""A bf16 or f16 weight read by a linear layer on the CPU is widened where its GEMM packs it, once per loaded
program (compiler/cpu/fuse_weight_conversions.py), instead of by a kernel of its own on every run: the program
runs no kernel reading the weight, and its result equals PyTorch's float32 math on the same values, rounded
to the output's type. A weight that two layers share is packed by each; one also read otherwise keeps its conversion
kernel, with the same results."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import luminal as lm
import luminal.functional as F
from luminal.compiler.cpu.prepack import read_only_packed

TYPES = {"bfloat16": (ml_dtypes.bfloat16, torch.bfloat16), "float16": (np.float16, torch.float16)}


def _weights(rng, dtype, *shape):
    return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(dtype)


def _read_only_when_packed(program, weight: str) -> bool:
    """Whether no kernel of a run reads the weight: only `lm_prepare` does, packing a GEMM's B panels."""
    return program.kernels.weights[weight] in read_only_packed(program.kernels)


@pytest.mark.parametrize("name", sorted(TYPES))
def test_a_linear_layers_half_weight_is_widened_at_load_and_equals_torch(name):
    np_type, torch_type = TYPES[name]
    rng = np.random.default_rng(3)
    weights = {"w": _weights(rng, np_type, 48, 40), "b": _weights(rng, np_type, 48)}
    g = lm.Graph()
    x = g.input("x", (lm.sym("batch", max=8), 5, 40), dtype=lm.dtypes.dtype_of(np.dtype(np_type)))
    w, b = (g.weight(k, v.shape, dtype=lm.dtypes.dtype_of(v.dtype)) for k, v in weights.items())
    F.linear(x, w, b).output("y")
    g.bind(weights)
    program = lm.compile(g, target="cpu")

    assert _read_only_when_packed(program, "w")
    for batch in (1, 3):
        xs = _weights(rng, np_type, batch, 5, 40)
        got = program.run({"x": xs})["y"]
        exact = torch.nn.functional.linear(*(torch.from_numpy(v.astype(np.float32)) for v in (xs, *weights.values())))
        want = exact.to(torch_type).float().numpy()  # what float32 math on these values rounds to
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=2e-2)


def _two_layers(reads_w_elsewhere: bool):
    rng = np.random.default_rng(4)
    shared = _weights(rng, ml_dtypes.bfloat16, 32, 32)
    g = lm.Graph()
    x = g.input("x", (2, 32), dtype=lm.dtypes.bfloat16)
    w = g.weight("w", shared.shape, dtype=lm.dtypes.bfloat16)
    y = F.linear(F.linear(x, w), w)
    (y + w.sum(0) if reads_w_elsewhere else y).output("y")
    g.bind({"w": shared})
    xs = _weights(rng, ml_dtypes.bfloat16, 2, 32)
    tw = torch.from_numpy(shared.astype(np.float32))
    first = torch.nn.functional.linear(torch.from_numpy(xs.astype(np.float32)), tw).to(torch.bfloat16).float()
    want = torch.nn.functional.linear(first, tw).to(torch.bfloat16).float()
    if reads_w_elsewhere:
        want = (want + tw.sum(0).to(torch.bfloat16).float()).to(torch.bfloat16).float()
    return lm.compile(g, target="cpu"), xs, want.numpy()


@pytest.mark.parametrize("reads_w_elsewhere", [False, True])
def test_a_weight_two_layers_share_is_packed_by_each_unless_read_otherwise_too(reads_w_elsewhere):
    program, xs, want = _two_layers(reads_w_elsewhere)
    assert _read_only_when_packed(program, "w") != reads_w_elsewhere  # else converted on each run, for all readers
    np.testing.assert_allclose(program.run({"x": xs})["y"].astype(np.float32), want, rtol=3e-2, atol=3e-2)
