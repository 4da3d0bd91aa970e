"""Benchmark models built twice from one set of weights: as a luminal graph and as PyTorch eager code."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import luminal as lm
import luminal.functional as F


@dataclass(frozen=True)
class BlockConfig:
    """A pre-norm transformer encoder block (BERT/MiniLM-like sizes scaled down for a 2-core machine)."""

    dim: int = 128
    heads: int = 4
    ffn: int = 512
    seq: int = 64


def block_weights(cfg: BlockConfig, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    d, f = cfg.dim, cfg.ffn
    return {
        "ln1.weight": np.ones(d, np.float32),
        "ln1.bias": np.zeros(d, np.float32),
        "qkv.weight": w(3 * d, d),
        "qkv.bias": np.zeros(3 * d, np.float32),
        "out.weight": w(d, d),
        "out.bias": np.zeros(d, np.float32),
        "ln2.weight": np.ones(d, np.float32),
        "ln2.bias": np.zeros(d, np.float32),
        "fc1.weight": w(f, d),
        "fc1.bias": np.zeros(f, np.float32),
        "fc2.weight": w(d, f),
        "fc2.bias": np.zeros(d, np.float32),
    }


def luminal_block(cfg: BlockConfig, weights: dict[str, np.ndarray], layers: int = 1) -> lm.Graph:
    """`layers` copies of the block (one weight set, as the benchmark only times the shape of the work), in the
    weights' dtype (float32, or bfloat16 for the bf16 rows)."""
    g = lm.Graph()
    dtype = lm.dtypes.dtype_of(weights["qkv.weight"].dtype)
    x = g.input("x", (lm.sym("batch", max=64), cfg.seq, cfg.dim), dtype=dtype)
    p = {name: g.weight(name, arr.shape, dtype=dtype) for name, arr in weights.items()}
    for _ in range(layers):
        x = _luminal_layer(cfg, p, x)
    x.output("y")
    g.bind(weights)
    return g


def _luminal_layer(cfg: BlockConfig, p: dict, x):
    b, s, d, h = lm.sym("batch", max=64), cfg.seq, cfg.dim, cfg.heads
    y = F.layer_norm(x, (d,), p["ln1.weight"], p["ln1.bias"])
    qkv = F.linear(y, p["qkv.weight"], p["qkv.bias"]).reshape(b, s, 3, h, d // h).permute(2, 0, 3, 1, 4)
    attn = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
    x = x + F.linear(attn.transpose(1, 2).reshape(b, s, d), p["out.weight"], p["out.bias"])
    y = F.layer_norm(x, (d,), p["ln2.weight"], p["ln2.bias"])
    return x + F.linear(F.gelu(F.linear(y, p["fc1.weight"], p["fc1.bias"])), p["fc2.weight"], p["fc2.bias"])


def torch_block(cfg: BlockConfig, weights: dict[str, np.ndarray], layers: int = 1):
    """The same block as a PyTorch eager function (inference mode)."""
    import torch
    import torch.nn.functional as TF

    p = {k: torch.from_numpy(v) for k, v in weights.items()}
    d, h = cfg.dim, cfg.heads

    def forward(x: torch.Tensor) -> torch.Tensor:
        for _ in range(layers):
            x = layer(x)
        return x

    def layer(x: torch.Tensor) -> torch.Tensor:
        b, s = x.shape[0], x.shape[1]
        y = TF.layer_norm(x, (d,), p["ln1.weight"], p["ln1.bias"])
        qkv = TF.linear(y, p["qkv.weight"], p["qkv.bias"]).reshape(b, s, 3, h, d // h).permute(2, 0, 3, 1, 4)
        attn = TF.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        x = x + TF.linear(attn.transpose(1, 2).reshape(b, s, d), p["out.weight"], p["out.bias"])
        y = TF.layer_norm(x, (d,), p["ln2.weight"], p["ln2.bias"])
        return x + TF.linear(TF.gelu(TF.linear(y, p["fc1.weight"], p["fc1.bias"])), p["fc2.weight"], p["fc2.bias"])

    return forward


MLP = BlockConfig(dim=256, heads=1, ffn=1024, seq=128)
MINILM = BlockConfig(dim=384, heads=12, ffn=1536, seq=128)  # all-MiniLM-L6-v2's layer shape


def mlp_weights(cfg: BlockConfig, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "fc1.weight": (rng.standard_normal((cfg.ffn, cfg.dim)) / np.sqrt(cfg.dim)).astype(np.float32),
        "fc1.bias": np.zeros(cfg.ffn, np.float32),
        "fc2.weight": (rng.standard_normal((cfg.dim, cfg.ffn)) / np.sqrt(cfg.ffn)).astype(np.float32),
        "fc2.bias": np.zeros(cfg.dim, np.float32),
    }


def luminal_mlp(cfg: BlockConfig, weights: dict[str, np.ndarray]) -> lm.Graph:
    g = lm.Graph()
    x = g.input("x", (lm.sym("batch", max=64), cfg.seq, cfg.dim))
    p = {name: g.weight(name, arr.shape) for name, arr in weights.items()}
    F.linear(F.gelu(F.linear(x, p["fc1.weight"], p["fc1.bias"])), p["fc2.weight"], p["fc2.bias"]).output("y")
    g.bind(weights)
    return g


def torch_mlp(cfg: BlockConfig, weights: dict[str, np.ndarray]):
    import torch
    import torch.nn.functional as TF

    p = {k: torch.from_numpy(v) for k, v in weights.items()}
    return lambda x: TF.linear(TF.gelu(TF.linear(x, p["fc1.weight"], p["fc1.bias"])), p["fc2.weight"], p["fc2.bias"])
