"""Attention against PyTorch: scaled_dot_product_attention with every mask kind (none, bool, float, causal,
fully masked rows), custom scale, grouped-query heads, half precision and a symbolic sequence length; rotary
embeddings against a torch implementation of Hugging Face's rotate_half formula; dropout; and the errors."""

import numpy as np
import pytest
import torch
import torch.nn.functional as tF

import luminal as lm
from luminal import functional as F
from luminal import ops
from tests.opcheck import check

sdpa = tF.scaled_dot_product_attention
lm_sdpa = F.scaled_dot_product_attention
QKV = [(2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 3)]  # [batch, heads, seq, dim]; 5 queries over 6 keys, Ev = 3


def _data(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def test_sdpa():
    check("sdpa", sdpa, lm_sdpa, QKV, reduction=True)
    check(
        "sdpa",
        lambda q, k, v: sdpa(q, k, v, scale=0.3),
        lambda q, k, v: lm_sdpa(q, k, v, scale=0.3),
        QKV,
        reduction=True,
    )


@pytest.mark.parametrize("q_len,kv_len", [(5, 5), (4, 6), (6, 4)])
def test_sdpa_causal(q_len, kv_len):
    # torch's causal mask is tril(ones(L, S)): aligned top-left, also when L != S
    shapes = [(2, 3, q_len, 4), (2, 3, kv_len, 4), (2, 3, kv_len, 3)]
    check(
        "sdpa_causal",
        lambda q, k, v: sdpa(q, k, v, is_causal=True),
        lambda q, k, v: lm_sdpa(q, k, v, is_causal=True),
        shapes,
        reduction=True,
    )


def test_sdpa_bool_mask_with_fully_masked_row():
    mask = np.random.default_rng(1).random((5, 6)) < 0.5
    mask[2] = False  # a query that may attend nothing: torch gives zeros, not nan
    check(
        "sdpa_mask_bool",
        lambda q, k, v, m: sdpa(q, k, v, attn_mask=m),
        lambda q, k, v, m: lm_sdpa(q, k, v, attn_mask=m),
        inputs=[*_data(QKV), mask],
        reduction=True,
    )
    batch_mask = np.random.default_rng(2).random((2, 1, 5, 6)) < 0.7  # broadcast over heads
    check(
        "sdpa_mask_bool",
        lambda q, k, v, m: sdpa(q, k, v, attn_mask=m),
        lambda q, k, v, m: lm_sdpa(q, k, v, attn_mask=m),
        inputs=[*_data(QKV), batch_mask],
        reduction=True,
    )


def test_sdpa_float_mask():
    bias = np.random.default_rng(3).standard_normal((2, 1, 5, 6)).astype(np.float32)
    bias[0, 0, 1, :3] = -np.inf  # an additive mask may carry -inf too
    check(
        "sdpa_mask_float",
        lambda q, k, v, m: sdpa(q, k, v, attn_mask=m),
        lambda q, k, v, m: lm_sdpa(q, k, v, attn_mask=m),
        inputs=[*_data(QKV), bias],
        reduction=True,
    )


def test_sdpa_gqa():
    shapes = [(2, 6, 5, 4), (2, 2, 5, 4), (2, 2, 5, 3)]  # 3 query heads per kv head
    opts = {"is_causal": True, "enable_gqa": True}
    check(
        "sdpa_gqa",
        lambda q, k, v: sdpa(q, k, v, **opts),
        lambda q, k, v: lm_sdpa(q, k, v, **opts),
        shapes,
        reduction=True,
    )
    check(
        "sdpa_gqa",
        lambda q, k, v: sdpa(q, k, v, enable_gqa=True),
        lambda q, k, v: lm_sdpa(q, k, v, enable_gqa=True),
        [(2, 4, 3, 4), (2, 1, 5, 4), (2, 1, 5, 4)],
        reduction=True,
    )


def test_sdpa_gqa_repeats_kv_heads_as_views():
    g = lm.Graph()
    q, k, v = g.input("q", (1, 4, 3, 8)), g.input("k", (1, 2, 3, 8)), g.input("v", (1, 2, 3, 8))
    lm_sdpa(q, k, v, enable_gqa=True)
    readers = [src for node in g.nodes if isinstance(node.op, ops.Mul) for src, _ in node.inputs]
    assert k.node in readers and v.node in readers  # the products read the kv inputs directly: nothing copied


def test_sdpa_three_dim_inputs_and_broadcast_kv():
    check("sdpa", sdpa, lm_sdpa, [(3, 5, 4), (3, 6, 4), (3, 6, 2)], reduction=True)
    check("sdpa", sdpa, lm_sdpa, [(2, 3, 5, 4), (2, 1, 6, 4), (2, 1, 6, 4)], reduction=True)  # one kv head broadcast


def test_sdpa_symbolic_sequence_length():
    # 2-D [seq, dim] inputs: check's symbolic variant makes the sequence length itself symbolic
    check(
        "sdpa_causal",
        lambda q, k, v: sdpa(q, k, v, is_causal=True),
        lambda q, k, v: lm_sdpa(q, k, v, is_causal=True),
        [(6, 4), (6, 4), (6, 4)],
        reduction=True,
    )
    s = lm.sym("s", max=32)
    g = lm.Graph()
    q, k, v = (g.input(n, (1, 2, s, 4)) for n in "qkv")
    lm_sdpa(q, k, v, is_causal=True).output("o")
    for length in (1, 7):
        arrays = _data([(1, 2, length, 4)] * 3, seed=length)
        want = sdpa(*map(torch.from_numpy, arrays), is_causal=True).numpy()
        got = lm.run(g, dict(zip("qkv", arrays)))["o"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_sdpa_half(dtype):
    shapes = [(2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 8)]
    check("sdpa", sdpa, lm_sdpa, shapes, dtype=dtype)
    check(
        "sdpa_causal",
        lambda q, k, v: sdpa(q, k, v, is_causal=True),
        lambda q, k, v: lm_sdpa(q, k, v, is_causal=True),
        shapes,
        dtype=dtype,
    )


# ---- rotary embeddings -------------------------------------------------------------------------------


def _hf_rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def _hf_apply_rotary(x, cos, sin):
    return x * cos + _hf_rotate_half(x) * sin


def _hf_cos_sin(positions, dim, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs = positions[..., None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def test_rotate_half():
    check("rotate_half", _hf_rotate_half, F.rotate_half, [(2, 3, 8)])


def test_apply_rotary_emb():
    check("apply_rotary_emb", _hf_apply_rotary, F.apply_rotary_emb, [(2, 3, 5, 8), (5, 8), (5, 8)])
    check("apply_rotary_emb", _hf_apply_rotary, F.apply_rotary_emb, [(2, 3, 5, 8), (2, 1, 5, 8), (2, 1, 5, 8)])
    check("apply_rotary_emb", _hf_apply_rotary, F.apply_rotary_emb, [(2, 3, 5, 8), (5, 8), (5, 8)], dtype="bfloat16")


@pytest.mark.parametrize("theta", [10000.0, 500000.0])
def test_rotary_cos_sin(theta):
    positions = (np.arange(12).reshape(2, 6) * 3).astype(np.int64)
    check(
        "rotary_cos_sin",
        lambda p: _hf_cos_sin(p, 8, theta),
        lambda p: F.rotary_cos_sin(p, 8, theta),
        inputs=[positions],
    )


def test_rotary_end_to_end_matches_hf():
    positions = np.arange(5, dtype=np.int64)
    x = _data([(1, 2, 5, 8)])[0]

    def torch_fn(x, p):
        cos, sin = _hf_cos_sin(p, 8)
        return _hf_apply_rotary(x, cos, sin)

    def lm_fn(x, p):
        cos, sin = F.rotary_cos_sin(p, 8)
        return F.apply_rotary_emb(x, cos, sin)

    check("apply_rotary_emb", torch_fn, lm_fn, inputs=[x, positions])


def test_dropout():
    check("dropout", lambda x: tF.dropout(x, 0.3, training=False), lambda x: F.dropout(x, 0.3), [(3, 4)])
    g = lm.Graph()
    x = g.input("x", (3, 4))
    with pytest.raises(NotImplementedError, match="dropout: training=True"):
        F.dropout(x, 0.1, training=True)
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(x, 1.5)


def test_errors():
    g = lm.Graph()
    q, k, v = g.input("q", (1, 4, 3, 8)), g.input("k", (1, 3, 3, 8)), g.input("v", (1, 3, 3, 8))
    with pytest.raises(lm.ShapeError, match="4 query heads are not a whole multiple of 3"):
        lm_sdpa(q, k, v, enable_gqa=True)
    with pytest.raises(lm.ShapeError, match=r"scaled_dot_product_attention.*query \(1, 4, 3, 8\)"):
        lm_sdpa(q, g.input("k2", (1, 4, 3, 6)), v)
    with pytest.raises(ValueError, match="either attn_mask or is_causal"):
        lm_sdpa(q, q, q, attn_mask=g.input("m", (3, 3), dtype="bool"), is_causal=True)
    with pytest.raises(NotImplementedError, match="dropout_p"):
        lm_sdpa(q, q, q, dropout_p=0.1)
    with pytest.raises(lm.DTypeError, match="one floating dtype"):
        lm_sdpa(q, g.input("k3", (1, 4, 3, 8), dtype="float16"), q)
    with pytest.raises(lm.ShapeError, match="rotate_half: the last dim must be even"):
        F.rotate_half(g.input("odd", (2, 5)))


def test_sdpa_soft_capped_scores():
    """Gemma 2's attention: the scaled scores capped at 1.5 (well inside their range here), then the mask."""

    def capped(q, k, v, m):  # Hugging Face's eager Gemma 2 attention, written in torch
        scores = torch.tanh(q @ k.transpose(-1, -2) * 0.7 / 1.5) * 1.5
        return torch.softmax(scores.masked_fill(~m, -torch.inf), -1) @ v

    mask = np.tril(np.ones((5, 6), bool), 1)
    inputs = [*_data(QKV, seed=3), mask]
    check("sdpa_softcap", capped, lambda q, k, v, m: lm_sdpa(q, k, v, m, scale=0.7, softcap=1.5), inputs=inputs,
          reduction=True)  # fmt: skip
