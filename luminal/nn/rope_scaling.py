"""Rope scaling: how Hugging Face's Llama family stretches RoPE past the context a model was trained on, read
from a config's rope_parameters (transformers 5) or rope_scaling (transformers 4).

Every type rescales the default inverse frequencies inv[j] = theta^(-2j / dim); what it keeps unscaled differs:
  linear   all of them divided by factor (positions divided by factor)
  llama3   (Llama 3.1+) per band of wavelength 2 pi / inv[j], against original = original_max_position_embeddings:
           shorter than original / high_freq_factor kept, longer than original / low_freq_factor divided by
           factor, in between a blend whose weight on the kept frequency, s, rises linearly in original / wavelength
  yarn     a blend over a ramp of j between the dims that turn beta_fast and beta_slow times over the original
           context: below it kept, above it divided by factor; cos and sin are also scaled by attention_factor
  dynamic  (NTK) the base grows with the sequence: theta * (factor * L / M - (factor - 1))^(dim / (dim - 2)),
           L = max(largest position + 1, M), M = max_position_embeddings; L is only known when the graph runs
  longrope (Phi-3 "128k") each frequency divided by its own factor: short_factor[j] while L <= original, else
           long_factor[j], L = largest position + 1; cos and sin are scaled by attention_factor, by default
           sqrt(1 + ln(factor) / ln(original)), factor = max_position_embeddings / original unless given
Dynamic's L is each row's largest position in the call (luminal/nn/rotary.py). transformers recomputes inv_freq
whenever a call's sequence outgrows the last, so a prompt in one call and each decode step after it match it, as
do chunks matched by transformers fed the same chunks. What differs, being stateful or batch-wide there:
  - transformers takes L over the whole batch: left-padded rows of different lengths in one call each get here
    what they get from transformers alone (a request's rotation cannot depend on its batch-mates);
  - a prompt prefilled in several chunks (the serving engine's chunk graph) rotates each chunk's keys with that
    chunk's L, not the whole prompt's as transformers' one-call prefill does (only once past M);
  - transformers keeps a grown inv_freq across calls until a sequence shorter than M resets it, so a later call
    that is shorter yet still past M reuses the earlier L there; here every call uses its own.
Longrope's choice between its two lists follows the same per-row, per-call rule (L the row's largest position
+ 1 in the call); transformers takes it per call over the whole batch, so the first two points above hold for it
as well (a chunk of a long prompt that ends within the original context divides by short_factor, where
transformers' one-call prefill divides the whole prompt by long_factor). And where a sequence outgrows the
original context while decoding, transformers' Phi-3 generate() drops its cache and prefills the whole sequence
again with long_factor; here the keys already cached keep the rotation they were written with.
A config this cannot serve is refused, naming the field: an unknown rope type (NotImplementedError), a missing or
malformed number (ValueError).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope")


@dataclass(frozen=True)
class RopeScaling:
    rope_type: str = "default"
    factor: float = 1.0
    # The context the scaling stretches from: llama3's and yarn's original_max_position_embeddings, dynamic's
    # max_position_embeddings (beyond it the base grows).
    original_max_positions: int = 0
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    beta_fast: float = 32.0  # yarn: rotations over the original context above which a dim is kept
    beta_slow: float = 1.0  # yarn: rotations below which a dim is fully interpolated
    truncate: bool = True  # yarn: round the ramp's ends outwards to whole dims
    attention_factor: float = 1.0  # yarn and longrope: cos and sin are multiplied by it
    # longrope: what each frequency j is divided by, while a row stays within the original context / past it
    short_factor: tuple[float, ...] = ()
    long_factor: tuple[float, ...] = ()

    @classmethod
    def from_hf(cls, raw: dict[str, Any]) -> RopeScaling:
        """The rope scaling of a Hugging Face config dict (either spelling); RopeScaling() for the default."""
        rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind not in TYPES:
            raise NotImplementedError(f"rope_type {kind!r} is not built ({', '.join(TYPES)})")
        if kind == "default":
            return cls()
        if kind == "yarn":
            return _yarn(raw, rope)
        if kind == "longrope":
            return _longrope(raw, rope)
        factor = _number(rope, "factor", kind)
        if kind == "linear":
            return cls(kind, factor)
        if kind == "dynamic":
            return cls(kind, factor, _positive_int(raw, "max_position_embeddings", kind))
        low, high = _number(rope, "low_freq_factor", kind), _number(rope, "high_freq_factor", kind)
        if not 0 < low < high:
            raise ValueError(
                f"rope_type 'llama3': low_freq_factor {low} must be above 0 and below high_freq_factor {high}"
            )
        return cls(kind, factor, _original_positions(raw, rope, kind), low, high)

    def llama3_bands(self, dim: int, theta: float) -> tuple[int, int]:
        """(a, b): frequencies j < a are kept, j >= b divided by factor, a <= j < b blended. Decided on the
        float32 frequencies transformers computes, so a band edge falls where it does there."""
        wavelength = 2 * math.pi / default_inv_freq(dim, theta).astype(np.float64)  # grows with j
        kept = wavelength < self.original_max_positions / self.high_freq_factor
        divided = wavelength > self.original_max_positions / self.low_freq_factor
        return int(kept.sum()), dim // 2 - int(divided.sum())

    def yarn_ramp(self, dim: int, theta: float) -> tuple[float, float]:
        """(low, high): the blend's weight on the divided frequency rises linearly in j from 0 at low to 1 at high."""

        def dim_turning(rotations: float) -> float:  # the j whose frequency turns `rotations` times over the context
            return dim * math.log(self.original_max_positions / (rotations * 2 * math.pi)) / (2 * math.log(theta))

        low, high = dim_turning(self.beta_fast), dim_turning(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        return low, high + 0.001 if low == high else high  # an empty ramp would divide by zero


def default_inv_freq(dim: int, theta: float) -> np.ndarray:
    """float32 [dim / 2]: theta^(-2j / dim), computed in float32 as transformers does."""
    return (1.0 / np.power(np.float32(theta), np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim))).astype(
        np.float32
    )


def _yarn(raw: dict[str, Any], rope: dict[str, Any]) -> RopeScaling:
    original = _original_positions(raw, rope, "yarn")
    if "factor" not in rope:
        raise ValueError("rope_type 'yarn' needs rope_parameters['factor'] (null: max_position_embeddings / original)")
    numbers = dict(rope)
    if numbers["factor"] is None:  # transformers' reading of null: the ratio of the two contexts
        numbers["factor"] = _positive_int(raw, "max_position_embeddings", "yarn") / original
    factor = _number(numbers, "factor", "yarn")
    if numbers.get("attention_factor") is None:
        mscale, mscale_all_dim = rope.get("mscale"), rope.get("mscale_all_dim")
        both = mscale and mscale_all_dim
        numbers["attention_factor"] = (
            _mscale(factor, mscale) / _mscale(factor, mscale_all_dim) if both else _mscale(factor, 1)
        )
    numbers["beta_fast"], numbers["beta_slow"] = rope.get("beta_fast") or 32, rope.get("beta_slow") or 1  # 0: default
    beta_fast, beta_slow, attention = (
        _number(numbers, k, "yarn") for k in ("beta_fast", "beta_slow", "attention_factor")
    )
    truncate = bool(rope.get("truncate", True))
    return RopeScaling("yarn", factor, original, beta_fast=beta_fast, beta_slow=beta_slow, truncate=truncate,
                       attention_factor=attention)  # fmt: skip


def _longrope(raw: dict[str, Any], rope: dict[str, Any]) -> RopeScaling:
    original = _original_positions(raw, rope, "longrope")
    lists = [_factor_list(rope, key) for key in ("short_factor", "long_factor")]
    numbers = dict(rope)
    if numbers.get("factor") is None:  # transformers' default: the ratio of the two contexts
        numbers["factor"] = _positive_int(raw, "max_position_embeddings", "longrope") / original
    factor = _number(numbers, "factor", "longrope")
    if numbers.get("attention_factor") is None:  # LongRoPE's suggestion; 1 when nothing is stretched
        numbers["attention_factor"] = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    attention = _number(numbers, "attention_factor", "longrope")
    return RopeScaling("longrope", factor, original, attention_factor=attention, short_factor=lists[0],
                       long_factor=lists[1])  # fmt: skip


def _factor_list(rope: dict[str, Any], key: str) -> tuple[float, ...]:
    """A longrope list: numbers above 0 (each divides a frequency); its length is checked against the rotary dim
    where that is known (RotaryEmbedding)."""
    value = rope.get(key)
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"rope_type 'longrope' needs rope_parameters[{key!r}], a list of numbers; got {value!r}")
    for x in value:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
            raise ValueError(f"rope_type 'longrope': rope_parameters[{key!r}] holds {x!r}, not a number above 0")
    return tuple(float(x) for x in value)


def _mscale(factor: float, mscale: float) -> float:
    """YaRN's attention temperature, 0.1 * mscale * ln(factor) + 1 (1 when not stretched)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _original_positions(raw: dict[str, Any], rope: dict[str, Any], kind: str) -> int:
    """transformers' order: a top-level original_max_position_embeddings, the rope dict's, max_position_embeddings."""
    for where, key in ((raw, "original_max_position_embeddings"), (rope, "original_max_position_embeddings")):
        if where.get(key) is not None:
            return _positive_int(where, key, kind)
    return _positive_int(raw, "max_position_embeddings", kind)


def _number(where: dict[str, Any], key: str, kind: str) -> float:
    value = where.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"rope_type {kind!r} needs rope_parameters[{key!r}], a number above 0; got {value!r}")
    return float(value)


def _positive_int(where: dict[str, Any], key: str, kind: str) -> int:
    value = where.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"rope_type {kind!r} needs {key}, a positive integer; got {value!r}")
    return value
