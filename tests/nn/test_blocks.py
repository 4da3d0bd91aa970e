"""Composite layers against torch: MLP, SwiGLU, torch.nn.MultiheadAttention, torch.nn.TransformerEncoderLayer,
and grouped-query attention with rotary positions and a KV cache against a torch implementation of the same
formulas (Hugging Face's rotate_half RoPE, torch's SDPA with enable_gqa)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as tF

import luminal as lm
from luminal import nn
from tests.nn.modcheck import check_module, randomize, state_dict_numpy


class TorchMLP(torch.nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(dim, hidden), torch.nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(tF.gelu(self.fc1(x), approximate="tanh"))


class TorchSwiGLU(torch.nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate_proj = torch.nn.Linear(dim, hidden, bias=False)
        self.up_proj = torch.nn.Linear(dim, hidden, bias=False)
        self.down_proj = torch.nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down_proj(tF.silu(self.gate_proj(x)) * self.up_proj(x))


def test_mlp_and_swiglu():
    check_module(nn.MLP(6, 10, act="gelu_new"), TorchMLP(6, 10), [(2, 3, 6)])
    check_module(nn.SwiGLU(6, 10), TorchSwiGLU(6, 10), [(2, 3, 6)])


def _mha_masks(rng):
    padding = np.zeros((2, 5), bool)
    padding[1, 3:] = True  # the second sequence has two padding keys
    blocked = rng.random((4, 5)) < 0.3
    blocked[:, 0] = False  # every query keeps one key
    return padding, blocked


def test_multihead_attention():
    check_module(
        nn.MultiheadAttention(8, 2),
        torch.nn.MultiheadAttention(8, 2, batch_first=True),
        [(2, 4, 8), (2, 5, 8), (2, 5, 8)],
        torch_call=lambda m, q, k, v: m(q, k, v, need_weights=False)[0],
    )


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")  # torch's own deprecation notice
def test_multihead_attention_masks():
    padding, blocked = _mha_masks(np.random.default_rng(0))
    rng = np.random.default_rng(1)
    q, kv = (rng.standard_normal(s).astype(np.float32) for s in [(2, 4, 8), (2, 5, 8)])
    float_mask = rng.standard_normal((4, 5)).astype(np.float32)
    for mask in (blocked, float_mask):
        check_module(
            nn.MultiheadAttention(8, 4, bias=False),
            torch.nn.MultiheadAttention(8, 4, bias=False, batch_first=True),
            inputs=[q, kv, padding, mask],
            lm_call=lambda m, q, kv, p, a: m(q, kv, kv, key_padding_mask=p, attn_mask=a),
            torch_call=lambda m, q, kv, p, a: m(q, kv, kv, key_padding_mask=p, attn_mask=a, need_weights=False)[0],
        )


@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_transformer_encoder_layer(norm_first, activation):
    padding = np.zeros((2, 5), bool)
    padding[0, 4] = True
    x = np.random.default_rng(2).standard_normal((2, 5, 8)).astype(np.float32)
    check_module(
        nn.TransformerEncoderLayer(8, 2, 16, activation, norm_first=norm_first),
        torch.nn.TransformerEncoderLayer(8, 2, 16, 0.0, activation, norm_first=norm_first, batch_first=True),
        inputs=[x, padding],
        lm_call=lambda m, x, p: m(x, src_key_padding_mask=p),
        torch_call=lambda m, x, p: m(x, src_key_padding_mask=p),
    )


# ---- grouped-query attention with RoPE ------------------------------------------------------------------


class TorchGQA(torch.nn.Module):
    """Llama-style attention written from the formulas: rotate_half RoPE, GQA by repeat_interleave."""

    def __init__(self, hidden, heads, kv_heads, head_dim, theta):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.theta = heads, kv_heads, head_dim, theta
        self.q_proj = torch.nn.Linear(hidden, heads * head_dim, bias=True)
        self.k_proj = torch.nn.Linear(hidden, kv_heads * head_dim, bias=True)
        self.v_proj = torch.nn.Linear(hidden, kv_heads * head_dim, bias=True)
        self.o_proj = torch.nn.Linear(heads * head_dim, hidden, bias=False)

    def forward(self, x, positions):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        inv_freq = 1.0 / self.theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim)
        angles = positions[..., None].float() * inv_freq
        emb = torch.cat([angles, angles], -1)[:, None]
        cos, sin = emb.cos(), emb.sin()

        def rot(t):
            t1, t2 = t.chunk(2, -1)
            return t * cos + torch.cat([-t2, t1], -1) * sin

        q, k = rot(q), rot(k)
        groups = self.heads // self.kv_heads
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        out = tF.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


def _gqa_pair(theta=500.0):
    ours = nn.GroupedQueryAttention(12, num_heads=4, num_kv_heads=2, head_dim=4, qkv_bias=True)
    return ours, nn.RotaryEmbedding(4, theta), randomize(TorchGQA(12, 4, 2, 4, theta))


def _gqa_lm(attn, rope, x, positions, past=None):
    q_len = x.shape[1]
    kv_len = q_len if past is None else past[0].shape[2] + q_len
    mask = nn.causal_mask(x.graph, q_len, kv_len)
    return attn(x, rope(positions), mask, past)


def test_grouped_query_attention_with_rope():
    ours, rope, ref = _gqa_pair()
    positions = np.arange(6)[None].repeat(2, 0)
    x = np.random.default_rng(3).standard_normal((2, 6, 12)).astype(np.float32)
    check_module(
        ours,
        ref,
        inputs=[x, positions],
        lm_call=lambda m, x, p: _gqa_lm(m, rope, x, p)[0],
        torch_call=lambda m, x, p: m(x, p),
    )


def test_kv_cache_decode_step_matches_full_sequence():
    """Prefill 5 positions, then decode a sixth from the cache (past length a symbol): the sixth output
    equals the last row of attention over all six positions at once."""
    ours, rope, ref = _gqa_pair()
    x = np.random.default_rng(4).standard_normal((2, 6, 12)).astype(np.float32)
    with torch.no_grad():
        want = ref(torch.from_numpy(x), torch.arange(6)[None].repeat(2, 1)).numpy()

    weights = state_dict_numpy(ref)
    prefill = lm.Graph()
    seq = lm.sym("seq", max=64)
    out, (k, v) = _gqa_lm(ours, rope, prefill.input("x", (2, seq, 12)), prefill.input("pos", (2, seq), lm.int64))
    out.output("y"), k.output("k"), v.output("v")
    first = lm.run(prefill.bind(weights, strict=True), {"x": x[:, :5], "pos": np.arange(5)[None].repeat(2, 0)})

    step = lm.Graph()
    past = lm.sym("past", max=64)
    cache = (step.input("k", (2, 2, past, 4)), step.input("v", (2, 2, past, 4)))
    out, _ = _gqa_lm(ours, rope, step.input("x", (2, 1, 12)), step.input("pos", (2, 1), lm.int64), cache)
    out.output("y")
    feed = {"x": x[:, 5:], "pos": np.full((2, 1), 5), "k": first["k"], "v": first["v"]}
    second = lm.run(step.bind(weights, strict=True), feed)
    np.testing.assert_allclose(first["y"], want[:, :5], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(second["y"], want[:, 5:], rtol=1e-5, atol=1e-4)


def test_weight_names_are_state_dict_names():
    block = nn.DecoderLayer(8, 16, num_heads=2, num_kv_heads=1)
    names = set(block.parameter_shapes())
    assert "self_attn.k_proj.weight" in names and block.parameter_shapes()["self_attn.k_proj.weight"][0] == (4, 8)
    assert "mlp.gate_proj.weight" in names and "input_layernorm.weight" in names
    block.assign_names("model.layers.3.")
    assert "model.layers.3.post_attention_layernorm.weight" in block.parameter_shapes()


def test_tied_weights_register_once():
    g = lm.Graph()
    emb = nn.Embedding(10, 4)
    ids = g.input("ids", (2, 3), lm.int64)
    emb.attend(emb(ids)).output("logits")
    assert list(g.weights) == ["weight"]
