"""Shape buckets: the dims a CUDA graph is captured for, so that one capture serves many dims.

Each symbol's value rounds up to a power of two, capped by the symbol's declared maximum (and never below its
minimum). A graph captured for a bucket launches every kernel with the grid of the bucket's dims over an arena
planned for them; the live dims go in the dims block D, and each kernel returns from the blocks the live dims do
not need (compiler/gpu/kernels.py), so a run at any dims of the bucket computes exactly what an exact launch
would. Sizes grow at most 2x over the live ones, and a model with one symbol of range [1, 2048] needs at most
12 captures.
"""

from __future__ import annotations

from typing import Mapping

from luminal.symbolic import Expr


def round_up(value: int, lo: int, hi: int) -> int:
    """The bucket `value` falls in: the next power of two, clamped to [lo, hi] and never below value."""
    power = 1 if value <= 1 else 1 << (value - 1).bit_length()
    return max(min(power, hi), lo, value)


def bucket(env: Mapping[str, int], symbols: Mapping[str, Expr]) -> dict[str, int]:
    """The bucket dims for the live dims `env`, each symbol rounded up within its declared range."""
    return {name: round_up(int(env[name]), int(s.lo), int(s.hi)) for name, s in symbols.items()}


def key(env: Mapping[str, int], names: list[str]) -> tuple[int, ...]:
    return tuple(int(env[n]) for n in names)
