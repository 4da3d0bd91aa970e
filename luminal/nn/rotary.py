"""Rotary position embeddings (RoPE) as Hugging Face's Llama family applies them (the "default" rope type).

inv_freq[j] = theta^(-2j / rotary_dim); each head's first rotary_dim features are rotated by
position * inv_freq with the rotate_half layout (the two halves of the rotated part pair up).
"""

from __future__ import annotations

from luminal import dtypes as dt
from luminal import functional as F
from luminal.nn.module import Module
from luminal.tensor import Tensor


class RotaryEmbedding(Module):
    """Computes (cos, sin) [batch, 1, seq, rotary_dim] for integer positions [batch, seq]; no parameters."""

    def __init__(self, rotary_dim: int, theta: float = 10000.0) -> None:
        super().__init__()
        if rotary_dim % 2:
            raise ValueError(f"RotaryEmbedding: rotary_dim must be even, got {rotary_dim}")
        self.rotary_dim, self.theta = rotary_dim, theta

    def forward(self, positions: Tensor, dtype=dt.float32) -> tuple[Tensor, Tensor]:
        cos, sin = F.rotary_cos_sin(positions, self.rotary_dim, self.theta, dtype)
        return cos.unsqueeze(-3), sin.unsqueeze(-3)  # a heads axis to broadcast over

    def extra_repr(self) -> str:
        return f"rotary_dim={self.rotary_dim}, theta={self.theta}"


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate the first cos.shape[-1] features of x [batch, heads, seq, head_dim]; the rest pass (partial RoPE)."""
    rot = cos.shape[-1]
    if rot == x.shape[-1]:
        return F.apply_rotary_emb(x, cos, sin)
    return F.cat([F.apply_rotary_emb(x[..., :rot], cos, sin), x[..., rot:]], dim=-1)
