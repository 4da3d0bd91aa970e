"""Rotary position embeddings (RoPE) as Hugging Face's Llama family applies them, with its rope scaling types.

inv_freq[j] = theta^(-2j / rotary_dim); each head's first rotary_dim features are rotated by
position * inv_freq with the rotate_half layout (the two halves of the rotated part pair up). A scaled type
(luminal/nn/rope_scaling.py) multiplies inv_freq per frequency, in the graph from the frequency index j, so that
no table of constants enters it: linear, llama3 and yarn by factors fixed when the model is built, dynamic by one
computed from each row's largest position. Longrope's factors are a list with no formula: each list enters as
one Iota, an integer expression of j whose values are the factors' float32 values times a power of two (exact,
see `_factor_table`), so the search sees one leaf per list rather than a chain of an add per frequency.
"""

from __future__ import annotations

import math

import numpy as np

from luminal import dtypes as dt
from luminal import functional as F
from luminal.hl import prim
from luminal.nn.module import Module
from luminal.nn.rope_scaling import RopeScaling
from luminal.tensor import Tensor
from luminal.view import idx


class RotaryEmbedding(Module):
    """Computes (cos, sin) [batch, 1, seq, rotary_dim] for integer positions [batch, seq]; no parameters."""

    def __init__(self, rotary_dim: int, theta: float = 10000.0, scaling: RopeScaling | None = None) -> None:
        super().__init__()
        if rotary_dim % 2:
            raise ValueError(f"RotaryEmbedding: rotary_dim must be even, got {rotary_dim}")
        self.scaling = scaling or RopeScaling()
        if self.scaling.rope_type == "dynamic" and rotary_dim <= 2:  # its base's exponent is dim / (dim - 2)
            raise ValueError(f"RotaryEmbedding: dynamic rope scaling needs rotary_dim above 2, got {rotary_dim}")
        for key in ("short_factor", "long_factor") if self.scaling.rope_type == "longrope" else ():
            if len(getattr(self.scaling, key)) != rotary_dim // 2:  # one factor per frequency
                raise ValueError(
                    f"rope_type 'longrope': {key} holds {len(getattr(self.scaling, key))} factors; the rotary dim "
                    f"{rotary_dim} turns at {rotary_dim // 2} frequencies"
                )
        self.rotary_dim, self.theta = rotary_dim, theta

    def forward(self, positions: Tensor, dtype=dt.float32) -> tuple[Tensor, Tensor]:
        if self.scaling.rope_type == "default":
            cos, sin = F.rotary_cos_sin(positions, self.rotary_dim, self.theta, dtype)
        else:
            inv_freq = self._scaled_inv_freq(positions)
            cos, sin = F.rotary_tables(positions, inv_freq, dtype, self.scaling.attention_factor)
        return cos.unsqueeze(-3), sin.unsqueeze(-3)  # a heads axis to broadcast over

    def _scaled_inv_freq(self, positions: Tensor) -> Tensor:
        """inv_freq [dim], or [..., 1, dim] for dynamic: the default frequencies times each type's multiplier."""
        s, dim = self.scaling, self.rotary_dim
        j = F.rotary_frequency_index(positions.graph, dim)
        inv_freq = F.rotary_inv_freq(j, self.theta)
        if s.rope_type == "dynamic":  # (theta * stretch^(dim/(dim-2)))^(-2j/dim) = inv_freq * stretch^(-2j/(dim-2))
            exponent = F.log2(_ntk_stretch(positions, s)).unsqueeze(-1) * (j * (-2.0 / (dim - 2)))
            return inv_freq * prim.exp2(exponent)
        if s.rope_type == "linear":
            return inv_freq * (1.0 / s.factor)
        if s.rope_type == "longrope":  # inv_freq / short_factor[j], or / long_factor[j] once the row is past original
            short, long = (_factor_table(j.graph, f) for f in (s.short_factor, s.long_factor))
            largest = F.amax(prim.cast(positions, dt.float32), -1, keepdim=True)  # exact below 2^24
            past = prim.cast(largest > s.original_max_positions - 0.5, dt.float32).unsqueeze(-1)  # [..., 1, 1]
            return inv_freq / (short * (1.0 - past) + long * past)  # each product exact: past is 0 or 1
        # llama3 and yarn keep a share `kept` of each frequency unscaled and divide the rest by factor.
        if s.rope_type == "llama3":
            a, b = s.llama3_bands(dim, self.theta)
            k = idx(0, dim) % (dim // 2)
            below_a = prim.cast(prim.iota(j.graph, k < a, (dim,), dt.int32), dt.float32)
            blended = prim.cast(prim.iota(j.graph, (k < b) & (k >= a), (dim,), dt.int32), dt.float32)
            span = s.high_freq_factor - s.low_freq_factor  # smooth = (original / wavelength - low) / span
            smooth = inv_freq * (s.original_max_positions / (2 * math.pi * span)) - s.low_freq_factor / span
            kept = below_a + blended * smooth
        else:  # yarn: 1 - ramp, the ramp rising from 0 at dim `low` to 1 at `high`
            low, high = s.yarn_ramp(dim, self.theta)
            kept = 1.0 - F.clamp((j - low) * (1.0 / (high - low)), 0.0, 1.0)
        return inv_freq * (kept * (1.0 - 1.0 / s.factor) + 1.0 / s.factor)

    def extra_repr(self) -> str:
        scaled = "" if self.scaling.rope_type == "default" else f", scaling={self.scaling}"
        return f"rotary_dim={self.rotary_dim}, theta={self.theta}{scaled}"


def _ntk_stretch(positions: Tensor, s: RopeScaling) -> Tensor:
    """float32 [..., 1]: dynamic NTK's factor * L / M - (factor - 1) = 1 + factor * (L - M) / M per row, with
    L = max(the row's largest position + 1, M): 1 (the default frequencies) until the row outgrows M."""
    largest = F.amax(prim.cast(positions, dt.float32), -1, keepdim=True)
    length = F.maximum(largest + 1.0, float(s.original_max_positions))
    return (length - float(s.original_max_positions)) * (s.factor / s.original_max_positions) + 1.0


def _factor_table(graph, factors: tuple[float, ...]) -> Tensor:
    """float32 [2 * len(factors)]: factors[j] at both features of frequency j (rotate_half's layout), exactly.

    A float32 f is m * 2^-s for integers m and s, m below 2^24; one s serves every factor of the list, so the
    Iota's integer expression sum_j (k == j) * m_j (one term non-zero, so no partial sum overflows) cast to
    float32 and times 2^-s gives each factor's float32 value with no rounding."""
    values = np.asarray(factors, np.float32)
    exponents = np.frexp(values)[1]  # values = mantissa * 2^exponent, mantissa in [0.5, 1)
    shift = int(24 - exponents.min())  # 2^shift * each value is an integer
    if int(exponents.max()) + shift >= 63:
        raise ValueError(f"rope_type 'longrope': factors from {values.min()} to {values.max()} span too many octaves")
    half = len(factors)
    k = idx(0, 2 * half) % half
    table = sum(((k >= j) & (k < j + 1)) * int(np.ldexp(np.float64(v), shift)) for j, v in enumerate(values))
    return prim.cast(prim.iota(graph, table, (2 * half,), dt.int64), dt.float32) * float(2.0**-shift)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate the first cos.shape[-1] features of x [batch, heads, seq, head_dim]; the rest pass (partial RoPE)."""
    rot = cos.shape[-1]
    if rot == x.shape[-1]:
        return F.apply_rotary_emb(x, cos, sin)
    return F.cat([F.apply_rotary_emb(x[..., :rot], cos, sin), x[..., rot:]], dim=-1)
