"""Choosing tokens from rows of logits as the CUDA runtime's sampler does (runtime/cuda/sampling.cu): its meaning,
in numpy, which the device kernel is tested against.

Per row: scores are the logits plus an optional bias, at -inf outside an optional allowed-token bitmask. Greedy
(temperature 0) takes the highest score, the lowest id on ties, as `np.argmax` does. Otherwise z = score /
temperature; top-k keeps z >= the k-th largest z (ties kept, as Hugging Face's `TopKLogitsWarper`); the nucleus
keeps a token when the kept tokens more probable than it hold less than top_p of the kept mass (the most probable
token always stays; tokens of equal probability stand or fall together, where the host sampler's stable sort
would keep the lower ids first); the token is the Gumbel-max draw over the kept ones: argmax z - log(-log(u)).
Each u comes from a counter-based generator (splitmix64's mixing) keyed by (key, counter, token id): a draw
depends only on its sequence's key and the token's index, so a seeded request repeats whatever shares its batch.
These draws are not the host sampler's numpy stream (scheduler/generation/sampling.py): the same seed gives other
tokens on a CUDA worker than on a CPU one, with the same distribution. Arithmetic is float32, as on the device.
Log-probabilities, when asked, are of the raw logits' softmax (the model's distribution, before bias,
temperature and cuts), with the n most likely tokens, most likely first, lower id first on ties.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


@dataclass(frozen=True)
class RowSampling:
    temperature: float  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0: no cut
    key: int = 0  # the generator's key (a request's seed, or one drawn for it), taken modulo 2**64
    counter: int = 0  # which draw of the key's stream: the token's index in its sequence
    logprobs: int = -1  # -1: none; n >= 0: the chosen token's log-probability and the n most likely tokens


class Chosen(NamedTuple):
    tokens: np.ndarray  # int64 [rows]; -1 where no token was allowed
    logprobs: np.ndarray  # float32 [rows]: the chosen token's (meaningful where its row asked)
    top_ids: np.ndarray  # int64 [rows, capacity]: row r's first rows[r].logprobs columns are meaningful
    top_logprobs: np.ndarray  # float32 [rows, capacity]


def mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over uint64 values (wrapping, as the device's unsigned arithmetic does)."""
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def uniforms(key: int, counter: int, vocab: int) -> np.ndarray:
    """The u in (0, 1) of every token id for draw `counter` of `key` (float32, 24 random bits each)."""
    with np.errstate(over="ignore"):
        stream = mix(mix(np.array([key & MASK64], np.uint64)) + np.uint64(counter & MASK64))
        ids = np.arange(1, vocab + 1, dtype=np.uint64)
        bits = mix(stream + ids * np.uint64(GOLDEN)) >> np.uint64(40)
    return ((bits.astype(np.float32) + np.float32(0.5)) * np.float32(1 / 16777216)).astype(np.float32)


def allowed_mask(allowed: np.ndarray, vocab: int) -> np.ndarray:
    """A bitmask row (uint32 words, bit i % 32 of word i // 32 set: token i allowed) as booleans [vocab]."""
    bits = np.unpackbits(np.asarray(allowed, np.uint32).view(np.uint8), bitorder="little")
    return bits[:vocab].astype(bool)


def pack_allowed(allowed: np.ndarray) -> np.ndarray:
    """Booleans [rows, vocab] as the bitmask rows the sampler takes: uint32 [rows, ceil(vocab / 32)]."""
    rows, vocab = allowed.shape
    padded = np.zeros((rows, -(-vocab // 32) * 32), bool)
    padded[:, :vocab] = allowed
    return np.packbits(padded, axis=1, bitorder="little").view(np.uint32)


def choose_row(logits: np.ndarray, row: RowSampling, bias: np.ndarray | None = None,
               allowed: np.ndarray | None = None) -> int:  # fmt: skip
    """The token of one row of logits [vocab] (see the module docstring); -1 when no token is allowed."""
    scores = np.asarray(logits, np.float32)
    scores = scores + np.asarray(bias, np.float32) if bias is not None else scores.copy()
    if allowed is not None:
        scores[~allowed_mask(allowed, scores.size)] = -np.inf
    if not np.isfinite(scores).any() and not (scores == np.inf).any():
        return -1
    if row.temperature == 0:
        return int(np.argmax(scores))
    z = (scores / np.float32(row.temperature)).astype(np.float32)
    kept = z > -np.inf
    if 0 < row.top_k < z.size and kept.sum() >= row.top_k:
        kept &= z >= np.sort(z[kept])[-row.top_k]
    if row.top_p < 1:
        e = np.where(kept, np.exp(z - z[kept].max()), np.float32(0)).astype(np.float32)
        ascending = np.sort(z[kept])
        above = np.concatenate([np.cumsum(np.sort(e[kept])[::-1])[::-1], [np.float32(0)]])  # mass from each up
        held = above[np.searchsorted(ascending, z, side="right")]  # the kept mass strictly above each z
        kept &= held < np.float32(row.top_p) * e.sum(dtype=np.float32)
    noisy = z - np.log(-np.log(uniforms(row.key, row.counter, z.size)))
    return int(np.argmax(np.where(kept, noisy, -np.inf)))


def logprobs_row(logits: np.ndarray, token: int, top: int) -> tuple[float, list[tuple[int, float]]]:
    """The chosen token's log-probability under the raw logits' softmax and the `top` most likely tokens."""
    row = np.asarray(logits, np.float32)
    log_total = row.max() + np.log(np.exp(row - row.max()).sum(dtype=np.float32))
    order = np.lexsort((np.arange(row.size), -row))[:top]  # most likely first, lower id first on ties
    return float(row[token] - log_total), [(int(t), float(row[t] - log_total)) for t in order]


def choose_rows(logits: np.ndarray, rows: list[RowSampling], bias: np.ndarray | None = None,
                allowed: np.ndarray | None = None, logits_rows: list[int] | None = None) -> Chosen:  # fmt: skip
    """Every row's choice (row r from logits row `logits_rows[r]`, default r), laid out as the device sampler
    returns it."""
    if logits_rows is not None:
        logits = np.asarray(logits)[list(logits_rows)]
    capacity = max([1, *(r.logprobs for r in rows)])
    chosen = Chosen(np.full(len(rows), -1, np.int64), np.zeros(len(rows), np.float32),
                    np.zeros((len(rows), capacity), np.int64), np.zeros((len(rows), capacity), np.float32))  # fmt: skip
    for r, row in enumerate(rows):
        token = choose_row(logits[r], row, None if bias is None else bias[r], None if allowed is None else allowed[r])
        chosen.tokens[r] = token
        if row.logprobs >= 0 and token >= 0:
            chosen.logprobs[r], top = logprobs_row(logits[r], token, row.logprobs)
            for j, (t, lp) in enumerate(top):
                chosen.top_ids[r, j], chosen.top_logprobs[r, j] = t, lp
    return chosen
