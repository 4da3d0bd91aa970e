"""Small graphs that cover every kernel kind the IR has, each with its inputs: the cases the CUDA tests compile
with nvcc and run through the host shim, and the C dialect's byte-identity check."""

from __future__ import annotations

from typing import Callable

import ml_dtypes
import numpy as np

import luminal as lm
import luminal.functional as F
from luminal import nn
from luminal.nn.models.gpt2 import GPT2LMHeadModel
from luminal.quantize import dequantize, quantize_q8_0

Case = tuple[lm.Graph, dict[str, np.ndarray]]


def bind_random(g: lm.Graph, seed: int = 0) -> lm.Graph:
    """Bind every unbound weight to small random values of its shape and dtype."""
    rng = np.random.default_rng(seed)
    values = {}
    for label in g.unbound_weights():
        node = g.nodes[g.weights[label]]
        shape = tuple(int(d) for d in node.shape)
        values[label] = (rng.standard_normal(shape) * 0.2).astype(node.dtype.np)
    return g.bind(values) or g


def _floats(rng, *shape, dtype=np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def elementwise() -> Case:
    g, rng = lm.Graph(), np.random.default_rng(1)
    x, y = g.input("x", (5, 33)), g.input("y", (33,))
    (F.gelu(x * y + 1.0).exp2().sqrt() - x.sin()).output("out")
    return g, {"x": _floats(rng, 5, 33), "y": _floats(rng, 33)}


def reductions() -> Case:
    g, rng = lm.Graph(), np.random.default_rng(2)
    x = g.input("x", (6, 300))
    x.sum(-1).output("sum")
    x.amax(0).output("max")
    x.mean().output("mean")
    return g, {"x": _floats(rng, 6, 300)}


def matmul() -> Case:
    g, rng = lm.Graph(), np.random.default_rng(3)
    a, b = g.input("a", (2, 70, 40)), g.weight("b", (40, 90))
    bias = g.weight("bias", (90,))
    F.relu(a @ b + bias).output("out")
    return bind_random(g), {"a": _floats(rng, 2, 70, 40)}


def gemv() -> Case:
    """A decode step's linear layer: one row against a weight matrix (a GEMM with M = 1 today)."""
    g, rng = lm.Graph(), np.random.default_rng(11)
    x, w = g.input("x", (1, 256)), g.weight("w", (256, 300))
    F.silu(x @ w).output("out")
    return bind_random(g), {"x": _floats(rng, 1, 256)}


def half_matmul() -> Case:
    """A bf16 matmul large enough that the search makes it a GEMM, which then runs on tensor cores ("mma"):
    partial tiles along M, N and the contraction (not a multiple of 8: A is read element by element), B read
    along N, a bias and an activation as its epilogue."""
    g, rng = lm.Graph(), np.random.default_rng(13)
    x, w = g.input("x", (2, 70, 2044), lm.bfloat16), g.weight("w", (2044, 80), lm.bfloat16)
    F.relu(x @ w + g.weight("bias", (80,), lm.bfloat16)).output("out")
    return bind_random(g), {"x": _floats(rng, 2, 70, 2044, dtype=ml_dtypes.bfloat16)}


def half_matmul_fp16() -> Case:
    """An fp16 linear layer (its weight [out, in]) on tensor cores: both operands read along the contraction,
    16 bytes at a time."""
    g, rng = lm.Graph(), np.random.default_rng(14)
    x = g.input("x", (130, 2048), lm.float16)
    F.linear(x, g.weight("w", (136, 2048), lm.float16)).output("out")
    return bind_random(g), {"x": _floats(rng, 130, 2048, dtype=np.float16)}


def softmax_layernorm() -> Case:
    g, rng = lm.Graph(), np.random.default_rng(4)
    x = g.input("x", (lm.sym("rows", max=64), 200))
    F.softmax(x, dim=-1).output("softmax")
    F.layer_norm(x, (200,)).output("layernorm")
    return g, {"x": _floats(rng, 9, 200)}


def attention() -> Case:
    g, rng = lm.Graph(), np.random.default_rng(5)
    shape = (1, 2, 40, 16)
    q, k, v = (g.input(n, shape) for n in "qkv")
    F.scaled_dot_product_attention(q, k, v, is_causal=True).output("out")
    return g, {n: _floats(rng, *shape) for n in "qkv"}


def gather_scatter() -> Case:
    g, rng = lm.Graph(), np.random.default_rng(6)
    table, ids = g.input("table", (20, 8)), g.input("ids", (7,), dtype=lm.int32)
    F.embedding(ids, table).output("rows")
    cache, pos = g.input("cache", (10, 8)), g.input("pos", (3,), dtype=lm.int64)
    new = g.input("new", (3, 8))
    F.index_put(cache, (pos,), new).output("cache_out")
    feed = {"table": _floats(rng, 20, 8), "ids": rng.integers(0, 20, 7).astype(np.int32)}
    feed |= {"cache": _floats(rng, 10, 8), "pos": np.array([7, 2, 5]), "new": _floats(rng, 3, 8)}
    return g, feed


def where_casts() -> Case:
    g, rng = lm.Graph(), np.random.default_rng(7)
    x, h = g.input("x", (4, 17)), g.input("h", (4, 17), dtype=lm.float16)
    b = g.input("b", (4, 17), dtype=lm.bfloat16)
    F.where(x > 0, x, x * 0.5).output("where")
    (h * h + 1.0).output("half")
    (b.float() * 2.0).bfloat16().output("bf16")
    (x * 3.0).long().output("to_int")
    feed = {"x": _floats(rng, 4, 17), "h": _floats(rng, 4, 17, dtype=np.float16)}
    return g, feed | {"b": _floats(rng, 4, 17, dtype=ml_dtypes.bfloat16)}


def integer_types() -> Case:
    """Every integer type: wrapping arithmetic, unsigned comparisons, warp and row maxima (uint64's upper half
    included), float-to-int casts and gathers through narrow index types."""
    g, rng = lm.Graph(), np.random.default_rng(11)
    feed = {}
    for d in lm.dtypes.INTEGERS:
        x, y = g.input(f"x_{d.name}", (4, 300), dtype=d), g.input(f"y_{d.name}", (4, 300), dtype=d)
        high = d.max if d != lm.uint64 else 2**64 - 1
        feed[f"x_{d.name}"] = rng.integers(
            d.min, high, (4, 300), dtype=np.uint64 if d == lm.uint64 else np.int64, endpoint=True
        ).astype(d.np)
        feed[f"y_{d.name}"] = rng.integers(1, 100, (4, 300)).astype(d.np)
        (x * y + 1).output(f"arith_{d.name}")
        (x < y).output(f"less_{d.name}")
        F.remainder(x, y).output(f"mod_{d.name}")
        x.amax(1).output(f"max_{d.name}")
        F.maximum(x, y).output(f"maximum_{d.name}")
        (y.float() * -1.5).to(d).output(f"cast_{d.name}")
        F.embedding(y[:, :3] % 4, g.input(f"t_{d.name}", (4, 2))).output(f"gather_{d.name}")
        feed[f"t_{d.name}"] = _floats(rng, 4, 2)
    return g, feed


def float64_values() -> Case:
    """float64 computed in double: math, a row's block fold and a warp's, a GEMM-shaped sum, casts both ways
    (values float32 cannot hold, so a float32 step anywhere shows)."""
    g, rng = lm.Graph(), np.random.default_rng(12)
    x, w = g.input("x", (4, 300), dtype=lm.float64), g.input("w", (300, 5), dtype=lm.float64)
    (x.exp() * 1.000000001 + x.sin().sqrt().abs()).output("math")
    x.sum(1).output("row_sum")
    x.amax(1).output("row_max")
    (x @ w).output("gemm")
    (x * 1e9).long().output("to_int")
    (x.float() + 0.5).double().output("from_float")
    return g, {"x": rng.uniform(-2, 2, (4, 300)), "w": rng.uniform(-1, 1, (300, 5))}


def mlp() -> Case:
    g, rng = lm.Graph(), np.random.default_rng(8)
    x = g.input("x", (lm.sym("batch", max=32), 48))
    nn.MLP(48, 96).assign_names()(x).output("out")
    return bind_random(g), {"x": _floats(rng, 5, 48)}


def encoder_block() -> Case:
    g, rng = lm.Graph(), np.random.default_rng(9)
    x = g.input("x", (2, lm.sym("seq", max=32), 32))
    nn.TransformerEncoderLayer(32, 4, 64, "gelu").assign_names()(x).output("out")
    return bind_random(g), {"x": _floats(rng, 2, 11, 32)}


def gpt2() -> Case:
    """A one-layer GPT-2 (token and position embeddings, causal masked attention, GELU MLP, tied logits)."""
    g, rng = lm.Graph(), np.random.default_rng(10)
    config = dict(vocab_size=48, n_positions=16, n_embd=24, n_layer=1, n_head=3, n_inner=40)
    ids = g.input("input_ids", (2, lm.sym("seq", max=16)), lm.int64)
    mask = g.input("attention_mask", (2, lm.sym("seq", max=16)), lm.int64)
    GPT2LMHeadModel(config).assign_names()(ids, mask)[0].output("logits")
    attention_mask = np.ones((2, 6), np.int64)
    attention_mask[1, 4:] = 0  # right padding: the last two keys of row 2 are hidden
    return bind_random(g), {"input_ids": rng.integers(0, 48, (2, 6)), "attention_mask": attention_mask}


CASES: dict[str, Callable[[], Case]] = {
    f.__name__: f
    for f in (
        elementwise,
        reductions,
        matmul,
        gemv,
        half_matmul,
        half_matmul_fp16,
        softmax_layernorm,
        attention,
        gather_scatter,
        where_casts,
        integer_types,
        float64_values,
        mlp,
    )
}
MODELS: dict[str, Callable[[], Case]] = {"mlp": mlp, "encoder_block": encoder_block, "gpt2": gpt2}


def _linear(rows, k: int, n: int, dtype, skip: int = 0, scale: bool = False, live: int = 3) -> Case:
    """silu(x @ w.T) + residual with w stored [n, k + skip] (torch's linear layout) in `dtype`, its first `skip`
    columns sliced away; with `scale`, w dequantised by a per-row scale (an int8 weight's form). Symbolic rows are
    fed `live` rows."""
    g, rng = lm.Graph(), np.random.default_rng(k + n + skip)
    x, res = g.input("x", (rows, k)), g.input("res", (rows, n))
    w = g.weight("w", (n, k + skip), dtype=dtype)
    w = (w[:, skip:] if skip else w).float()
    if scale:
        w = w * g.weight("scale", (n, 1))
    (F.silu(x @ w.t()) + res).output("out")
    live = live if not isinstance(rows, int) else rows
    return bind_random(g), {"x": _floats(rng, live, k), "res": _floats(rng, live, n)}


def gemv_bf16() -> Case:
    """A decode step's linear layer: a bf16 weight read 8 elements per 16-byte load, rows a symbol."""
    return _linear(lm.sym("batch", max=4), 256, 300, lm.bfloat16)


def gemv_f32() -> Case:
    """A float32 linear at M = 1 (a Contract the tiled GEMM would take): 4 elements per load."""
    return _linear(1, 128, 70, lm.float32)


def gemv_f16_odd_k() -> Case:
    """K = 255 is no multiple of the vector width: scalar loads."""
    return _linear(2, 255, 37, lm.float16)


def gemv_misaligned() -> Case:
    """A weight view starting one element into each row: scalar loads."""
    return _linear(1, 256, 40, lm.bfloat16, skip=1)


def gemv_int8() -> Case:
    """An int8 weight times a per-row scale: 16 weights per load, the dequantisation evaluated as written."""
    return _linear(1, 128, 48, lm.int8, scale=True)


def gemv_rows_f32() -> Case:
    """Three rows (a Contract at M = 3): one block pass computes all three against each weight load."""
    return _linear(3, 128, 64, lm.float32)


def gemv_q8_0_rows() -> Case:
    """A Q8_0 projection (int8 in blocks of 32, a scale per block: luminal/quantize.py) over a symbol's rows, fed
    6 rows: two passes of 4 rows per block, the second with two rows past the last."""
    g, rng = lm.Graph(), np.random.default_rng(7)
    rows = lm.sym("batch", max=8)
    x = g.input("x", (rows, 96))
    w = dequantize(g.weight("w", (40, 96), dtype=lm.int8), g.weight("w_scale", (40, 3)))
    (x @ w.t()).output("out")
    q, scale = quantize_q8_0(rng.standard_normal((40, 96)).astype(np.float32))
    return g.bind({"w": q, "w_scale": scale}) or g, {"x": _floats(rng, 6, 96)}


GEMV_CASES: dict[str, Callable[[], Case]] = {
    f.__name__: f
    for f in (gemv_bf16, gemv_f32, gemv_f16_odd_k, gemv_misaligned, gemv_int8, gemv_rows_f32, gemv_q8_0_rows)
}


def every_kind_symbolic(n: int) -> Case:
    """Every kernel kind with its grid depending on one symbol `n` (max 40), fed at n: what a CUDA graph captured
    for a shape bucket launches with a larger grid than the live dims need (runtime/cuda/buckets.py)."""
    g, rng, sym = lm.Graph(), np.random.default_rng(12 + n), lm.sym("n", max=40)
    x, long = g.input("x", (sym, 33)), g.input("long", (sym, 300))
    F.gelu(x * 2.0 + 1.0).output("elementwise")
    long.sum(-1).output("warp_sum")
    F.softmax(long, dim=-1).output("row_softmax")
    a, b = g.input("a", (sym, 70, 40)), g.weight("b", (40, 90))
    F.relu(a @ b).output("gemm")
    q, k, v = (g.input(name, (1, 2, sym, 16)) for name in "qkv")
    F.scaled_dot_product_attention(q, k, v, is_causal=True).output("attention")
    table, ids = g.input("table", (20, 8)), g.input("ids", (sym,), dtype=lm.int32)
    F.embedding(ids, table).output("gather")
    cache, pos, new = g.input("cache", (48, 8)), g.input("pos", (sym,), dtype=lm.int64), g.input("new", (sym, 8))
    F.index_put(cache, (pos,), new).output("scatter")
    feed = {"x": _floats(rng, n, 33), "long": _floats(rng, n, 300), "a": _floats(rng, n, 70, 40)}
    feed |= {name: _floats(rng, 1, 2, n, 16) for name in "qkv"}
    feed |= {"table": _floats(rng, 20, 8), "ids": rng.integers(0, 20, n).astype(np.int32)}
    feed |= {"cache": _floats(rng, 48, 8), "pos": rng.permutation(48)[:n].astype(np.int64), "new": _floats(rng, n, 8)}
    return bind_random(g), feed
