"""bench/gguf_llama.py: the bench Llama as GGUF, read back with the gguf package's reader. Its query and key rows,
reordered for llama.cpp's rotation of adjacent pairs, give the attention scores transformers' rotation of halves
gives; every tensor is there with its shape (llama.cpp's shapes list the fastest axis first) and, in Q8_0, the
projections dequantise to within half a step of the float weights (and the float16 scale's rounding)."""

import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from gguf_llama import _pairs_adjacent, write_gguf  # noqa: E402


def _rope_halves(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """transformers' Llama rotation: dimension i with i + d/2."""
    h = x.shape[-1] // 2
    cos, sin = np.cos(angles), np.sin(angles)
    return np.concatenate([x[..., :h] * cos - x[..., h:] * sin, x[..., h:] * cos + x[..., :h] * sin], -1)


def _rope_pairs(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """llama.cpp's LLAMA rotation: dimensions 2i and 2i + 1."""
    cos, sin = np.cos(angles), np.sin(angles)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = even * cos - odd * sin, even * sin + odd * cos
    return out


def test_reordered_rows_give_the_same_attention_scores():
    rng = np.random.default_rng(0)
    heads, dim, hidden = 3, 8, 20
    wq, wk = rng.standard_normal((heads * dim, hidden)), rng.standard_normal((heads * dim, hidden))
    x = rng.standard_normal((5, hidden))  # 5 positions
    angles = np.arange(5)[:, None] * 10000.0 ** (-np.arange(dim // 2) * 2 / dim)

    def scores(q_rows, k_rows, rope):
        q = rope((x @ q_rows.T).reshape(5, heads, dim), angles[:, None, :])
        k = rope((x @ k_rows.T).reshape(5, heads, dim), angles[:, None, :])
        return np.einsum("phd,shd->hps", q, k)

    want = scores(wq, wk, _rope_halves)
    np.testing.assert_allclose(scores(_pairs_adjacent(wq, heads), _pairs_adjacent(wk, heads), _rope_pairs), want)
    assert not np.allclose(scores(wq, wk, _rope_pairs), want)  # without the reordering they differ


@pytest.mark.parametrize("q8_0", [False, True], ids=["f32", "q8_0"])
def test_every_tensor_is_written_with_its_shape(tmp_path, q8_0):
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    reader = gguf.GGUFReader(write_gguf(model, tmp_path / "m.gguf", q8_0=q8_0))
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 3 + 9 * config.num_hidden_layers
    assert reader.fields["general.architecture"].contents() == "llama"
    assert reader.fields["llama.attention.head_count_kv"].contents() == 2
    down = tensors["blk.1.ffn_down.weight"]
    assert list(down.shape) == [96, 64]  # [in, out]: the fastest axis first
    kind = gguf.GGMLQuantizationType.Q8_0 if q8_0 else gguf.GGMLQuantizationType.F32
    assert down.tensor_type == kind and tensors["token_embd.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    weight = model.model.layers[1].mlp.down_proj.weight.detach().numpy()
    got = gguf.quants.dequantize(down.data, down.tensor_type).reshape(weight.shape)
    scale = np.abs(weight.reshape(64, -1, 32)).max(-1, keepdims=True) / 127
    # half a step of rounding, plus the scale's own float16 rounding (2^-11 relative) times |q| <= 127
    assert (np.abs(got - weight).reshape(64, -1, 32) <= scale * (0.5 + 127 * 2.0**-11) + 1e-7).all()
