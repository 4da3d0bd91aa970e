"""Each ATen translator against PyTorch: a one-line torch function is exported (torch.export, core ATen
decomposition), run by the reference interpreter and compared with eager. The op named in each case must
appear in the translated graph, so a case cannot pass by testing some other translation: operators that core
ATen decomposes (softplus, tril, roll...) are checked on the program as traced, before decomposition, as well as
after it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import luminal as lm
import luminal.torch
from luminal.torch.decompositions import decomposition_table


class Lambda(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _x(*shape, low=-2.0, high=2.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) * (high - low) + low


def _i(*shape, high=5, seed=0):
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))


X, Y, P = _x(3, 4), _x(3, 4, seed=1), _x(3, 4, low=0.1, high=3.0)
IMG = _x(2, 3, 7, 7)
SEQ = _x(2, 2, 5, 8)

# (the ATen operator that must appear, the torch function, its inputs)
CASES = [
    ("aten.add.Tensor", lambda a, b: torch.add(a, b, alpha=2), (X, Y)),
    ("aten.sub.Tensor", lambda a, b: a - 3 * b, (X, Y)),
    ("aten.rsub.Scalar", lambda a: 1 - a, (X,)),
    ("aten.div.Tensor", lambda a, b: a / b, (X, P)),
    ("aten.div.Tensor_mode", lambda a, b: torch.div(a, b, rounding_mode="floor"), (X * 4, P)),
    ("aten.pow.Tensor_Scalar", lambda a: a**3, (X,)),
    ("aten.pow.Tensor_Tensor", lambda a, b: a**b, (P, X)),
    ("aten.remainder.Tensor", lambda a, b: torch.remainder(a, b), (X * 3, P)),
    ("aten.fmod.Tensor", lambda a, b: torch.fmod(a, b), (X * 3, P)),
    ("aten.maximum.default", torch.maximum, (X, Y)),
    ("aten.where.self", lambda a, b: torch.where(a > b, a, b * 2), (X, Y)),
    ("aten.clamp.default", lambda a: a.clamp(-0.5, 0.7), (X,)),
    ("aten.sqrt.default", torch.sqrt, (P,)),
    ("aten.rsqrt.default", torch.rsqrt, (P,)),
    ("aten.log.default", torch.log, (P,)),
    ("aten.exp.default", torch.exp, (X,)),
    ("aten.erf.default", torch.erf, (X,)),
    ("aten.sigmoid.default", torch.sigmoid, (X,)),
    ("aten.tanh.default", torch.tanh, (X,)),
    ("aten.gelu.default", lambda a: TF.gelu(a, approximate="tanh"), (X,)),
    ("aten.hardtanh.default", lambda a: TF.hardtanh(a, -0.5, 0.5), (X,)),
    ("aten.leaky_relu.default", lambda a: TF.leaky_relu(a, 0.2), (X,)),
    ("aten.elu.default", TF.selu, (X,)),
    ("aten.softplus.default", lambda a: TF.softplus(a, 2.0, 1.0), (X,)),
    ("aten.abs.default", torch.abs, (X,)),
    ("aten.sign.default", torch.sign, (X,)),
    ("aten.floor.default", torch.floor, (X,)),
    ("aten.logical_not.default", lambda a: torch.logical_not(a > 0), (X,)),
    ("aten.bitwise_not.default", lambda a: ~(a > 0), (X,)),
    ("aten.bitwise_and.Tensor", lambda a, b: (a > 0) & (b > 0), (X, Y)),
    ("aten.sum.dim_IntList", lambda a: a.sum(-1, keepdim=True), (X,)),
    ("aten.mean.dim", lambda a: a.mean((0, 1)), (X,)),
    ("aten.var.correction", lambda a: a.var(1, unbiased=True), (X,)),
    ("aten.amax.default", lambda a: a.amax(0), (X,)),
    ("aten.max.dim", lambda a: torch.max(a, 1), (X,)),
    ("aten.argmin.default", lambda a: a.argmin(1), (X,)),
    ("aten.any.dim", lambda a: (a > 1).any(1), (X,)),
    ("aten.prod.dim_int", lambda a: a.prod(1), (X,)),
    ("aten.cumsum.default", lambda a: a.cumsum(1), (X,)),
    ("aten._log_softmax.default", lambda a: a.log_softmax(0), (X,)),
    ("aten.logsumexp.default", lambda a: a.logsumexp(1), (X,)),
    ("aten.bmm.default", torch.bmm, (_x(2, 3, 4), _x(2, 4, 5, seed=1))),
    ("aten.mm.default", torch.mm, (X, Y.T)),
    ("aten.slice.Tensor", lambda a: a[1:, ::2] + a[:-1, 1::2], (X,)),
    ("aten.select.int", lambda a: a[:, -1], (X,)),
    ("aten.expand.default", lambda a: a[:, :1].expand(-1, 5), (X,)),
    ("aten.split_with_sizes.default", lambda a: torch.split(a, [1, 3], 1)[1] * 2, (X,)),
    ("aten.cat.default", lambda a, b: torch.cat([a, b, a], 0), (X, Y)),
    ("aten.flip.default", lambda a: a.flip(0, 1), (X,)),
    ("aten.roll.default", lambda a: a.roll(1, 1), (X,)),
    ("aten.repeat.default", lambda a: a.repeat(2, 1, 3), (X,)),
    ("aten.constant_pad_nd.default", lambda a: TF.pad(a, (1, 2, 0, 1), value=0.5), (X,)),
    ("aten.index.Tensor", lambda a, i: a[i, 1:], (X, _i(5, high=3))),
    ("aten.index_select.default", lambda a, i: a.index_select(1, i), (X, _i(6, high=4))),
    ("aten.gather.default", lambda a, i: a.gather(1, i), (X, _i(3, 2, high=4))),
    ("aten.embedding.default", lambda i, w: TF.embedding(i, w), (_i(2, 3, high=3), X)),
    ("aten.tril.default", lambda a: a.tril(-1), (X,)),
    ("aten.triu.default", lambda a: a.triu(1), (X,)),
    ("aten.arange.start_step", lambda a: a * torch.arange(1, 9, 2), (X,)),
    ("aten.full.default", lambda a: a + torch.full((3, 4), 2.5), (X,)),
    ("aten._to_copy.default", lambda a: (a * 3).to(torch.int64), (X,)),
    ("aten.convolution.default", lambda a, w: TF.conv1d(a, w, stride=2, padding=1), (_x(2, 4, 9), _x(6, 4, 3))),
    ("aten.convolution.default", lambda a, w: TF.conv_transpose2d(a, w, stride=2), (_x(1, 3, 4, 4), _x(3, 2, 3, 3))),
    ("aten.max_pool2d_with_indices.default", lambda a: TF.max_pool2d(a, 3, 2, 1, ceil_mode=True), (IMG,)),
    ("aten.avg_pool2d.default", lambda a: TF.avg_pool2d(a, 3, 2, 1, count_include_pad=False), (IMG,)),
    ("aten._adaptive_avg_pool2d.default", lambda a: TF.adaptive_avg_pool2d(a, (3, 2)), (IMG,)),
    ("aten.native_group_norm.default", lambda a: TF.group_norm(a, 3), (_x(2, 6, 5),)),
    ("aten.native_layer_norm.default", lambda a: TF.layer_norm(a, (4,)), (X,)),
    ("aten.exp2.default", torch.exp2, (X,)),
    ("aten.log2.default", torch.log2, (P,)),
    ("aten.log10.default", torch.log10, (P,)),
    ("aten.expm1.default", torch.expm1, (X,)),
    ("aten.cos.default", torch.cos, (X,)),
    ("aten.tan.default", torch.tan, (X * 0.5,)),
    ("aten.silu.default", TF.silu, (X,)),
    ("aten.mish.default", TF.mish, (X,)),
    ("aten.hardswish.default", TF.hardswish, (X,)),
    ("aten.hardsigmoid.default", TF.hardsigmoid, (X,)),
    ("aten.ceil.default", torch.ceil, (X,)),
    ("aten.trunc.default", torch.trunc, (X,)),
    ("aten.round.default", torch.round, (X * 3,)),
    ("aten.isnan.default", lambda a: torch.isnan(a.log()), (X,)),
    ("aten.ne.Scalar", lambda a: (a * 2).round() != 1, (X,)),
    ("aten.amin.default", lambda a: a.amin(1, keepdim=True), (X,)),
    ("aten.min.dim", lambda a: torch.min(a, 0), (X,)),
    ("aten.argmax.default", lambda a: a.argmax(0, keepdim=True), (X,)),
    ("aten.all.dim", lambda a: (a > -1.5).all(1), (X,)),
    ("aten.max.default", torch.max, (X,)),
    ("aten.clamp_min.default", lambda a: a.clamp_min(0.3), (X,)),
    ("aten.lerp.Scalar", lambda a, b: torch.lerp(a, b, 0.3), (X, Y)),
    (
        "aten.baddbmm.default",
        lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2),
        (_x(2, 3, 5), _x(2, 3, 4), _x(2, 4, 5)),
    ),  # fmt: skip
    ("aten.stack.default", lambda a, b: torch.stack([a, b], 1), (X, Y)),
    ("aten.split.Tensor", lambda a: torch.split(a, 2, 0), (X,)),
    ("aten.unbind.int", lambda a: torch.unbind(a, 1), (X,)),
    ("aten.transpose.int", lambda a: a.transpose(0, 1) @ a, (X,)),
    ("aten.narrow.default", lambda a: a.narrow(1, 1, 2), (X,)),
    ("aten.masked_fill.Scalar", lambda a: a.masked_fill(a > 0.5, -3.0), (X,)),
    (
        "aten.scatter_add.default",
        lambda a, i, v: a.scatter_add(1, i, v),
        (X, torch.tensor([[0, 0], [1, 3], [3, 3]]), Y),
    ),  # fmt: skip
    ("aten.full_like.default", lambda a: torch.full_like(a, 7, dtype=torch.int64), (X,)),
    ("aten.zeros.default", lambda a: a + torch.zeros(4), (X,)),
    ("aten.max_pool1d.default", lambda a: TF.max_pool1d(a, 2), (_x(2, 3, 7),)),
    ("aten.avg_pool1d.default", lambda a: TF.avg_pool1d(a, 3, 2, 1), (_x(2, 3, 7),)),
    ("aten.adaptive_avg_pool1d.default", lambda a: TF.adaptive_avg_pool1d(a, 3), (_x(2, 3, 7),)),
    ("aten.copy.default", lambda a, b: a.clone().copy_(b[:1]), (X, Y)),
    ("aten.index_put.default", lambda a, i, v: a.index_put((i,), v, accumulate=True), (X, _i(5, high=3), _x(5, 4))),
    ("aten.scatter.src", lambda a, i, v: a.scatter(1, i, v), (X, torch.tensor([[0, 2], [1, 3], [3, 0]]), Y)),
    ("aten.scatter.value", lambda a, i: a.scatter(1, i, 9.0), (X, torch.tensor([[0, 2], [1, 3], [3, 0]]))),
    ("aten.var_mean.correction", lambda a: torch.var_mean(a, 1, correction=0), (X,)),
    ("aten.std.dim", lambda a: a.std(0), (X,)),
    ("aten.var.dim", lambda a: a.var(1, unbiased=False), (X,)),
    ("aten.linalg_vector_norm.default", lambda a: torch.linalg.vector_norm(a, 3, 1), (X,)),
    ("aten.cumprod.default", lambda a: a.cumprod(1), (X,)),
    ("aten.log_sigmoid.default", TF.logsigmoid, (X,)),
    ("aten.pad.default", lambda a: TF.pad(a, (1, 2, 2, 1), mode="reflect"), (IMG,)),
    ("aten.pad.default", lambda a: TF.pad(a, (2, 1), mode="replicate"), (_x(2, 3, 5),)),
    ("aten.upsample_nearest2d.vec", lambda a: TF.interpolate(a, size=(10, 4)), (IMG,)),
    ("aten.upsample_nearest2d.vec", lambda a: TF.interpolate(a, scale_factor=2.0), (IMG,)),
    ("aten.upsample_bilinear2d.vec", lambda a: TF.interpolate(a, size=(10, 4), mode="bilinear"), (IMG,)),
    ("aten.upsample_bilinear2d.vec", lambda a: TF.interpolate(a, scale_factor=1.5, mode="bilinear"), (IMG,)),
    ("aten.upsample_bilinear2d.vec", lambda a: TF.interpolate(a, (3, 9), mode="bilinear", align_corners=True), (IMG,)),
    ("aten.upsample_linear1d.vec", lambda a: TF.interpolate(a, 1, mode="linear"), (_x(2, 3, 5),)),
    (
        "aten.scaled_dot_product_attention.default",
        lambda q: TF.scaled_dot_product_attention(q, q, q, is_causal=True),
        (SEQ,),
    ),  # fmt: skip
]


def _called(program) -> set[str]:
    return {str(n.target) for n in program.graph.nodes if n.op == "call_function"}


def _eager(fn, inputs) -> list[torch.Tensor]:
    with torch.no_grad():
        out = fn(*inputs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


@pytest.mark.parametrize("op, fn, inputs", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_aten_op_matches_torch(op, fn, inputs):
    traced = torch.export.export(Lambda(fn), inputs)
    decomposed = traced.run_decompositions(decomposition_table())
    programs = [decomposed] if op in _called(decomposed) else [decomposed, traced]  # export uses the first
    assert op in _called(programs[-1]), f"{op} is not in the exported graph: {sorted(_called(programs[-1]))}"
    want = _eager(fn, inputs)
    for program in programs:
        graph = luminal.torch.from_exported_program(program)
        out = lm.run(graph, {name: x.numpy() for name, x in zip(graph.inputs, inputs)})
        assert len(out) == len(want)
        for i, w in enumerate(want):
            got = out[f"output{i}"]
            assert got.dtype == w.numpy().dtype
            np.testing.assert_allclose(got, w.numpy(), rtol=1e-5, atol=1e-5)


def test_every_registered_name_is_a_torch_operator():
    for name in luminal.torch.supported_operators():
        if name.startswith("operator."):
            continue
        _, packet, *overload = name.split(".")
        op = getattr(torch.ops.aten, packet)  # raises for a name torch does not have
        if overload:
            assert overload[0] in op.overloads(), name
