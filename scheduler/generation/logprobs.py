"""The log-probability of a chosen token and of the step's most likely alternatives, from the logits row the
engine already has: a log-softmax in float64 on the host. It is the model's own distribution, before temperature,
top-k and top-p (OpenAI documents the logprobs of sampled tokens so)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # the most likely tokens, most likely first (ties: lower id first)


def token_logprob(logits: np.ndarray, token: int, top: int) -> TokenLogprob:
    """`token`'s log-probability under one row of logits [vocab], with the `top` most likely tokens."""
    row = np.asarray(logits, np.float64).reshape(-1)
    shifted = row - row.max()
    logp = shifted - np.log(np.exp(shifted).sum())
    best: list[int] = []
    if top > 0:
        top = min(top, logp.size)
        candidates = np.argpartition(-logp, top - 1)[:top] if top < logp.size else np.arange(logp.size)
        best = sorted(candidates.tolist(), key=lambda t: (-logp[t], t))
    return TokenLogprob(int(token), float(logp[token]), tuple((t, float(logp[t])) for t in best))
