"""What changes a sequence's logits before its sampler chooses: OpenAI's `logit_bias` (added to the logits of
the named tokens) and a grammar's token mask (every token it forbids gets -inf). Both happen only in the sampling of
the sequences that asked: a sequence without them keeps the plain `Sampler`, so an unconstrained neighbour in the
same batch does no extra work. The greedy choice and the sampled one both see the shaped row; logprobs stay those
of the model's own logits (the engine computes them from the row it was given)."""

from __future__ import annotations

import numpy as np

from luminal.scheduler.generation.grammar import TokenConstraint
from luminal.scheduler.generation.sampling import Sampler, SamplingParams


class ShapedSampler(Sampler):
    def __init__(self, params: SamplingParams, constraint: TokenConstraint | None):
        super().__init__(params)
        self.constraint = constraint
        self._bias: np.ndarray | None = None  # built on the first row, once its width (the model's vocab) is known

    def choose(self, logits: np.ndarray) -> int:
        return super().choose(self.shape(logits))

    def shape(self, logits: np.ndarray) -> np.ndarray:
        """The row the sampler chooses from: biased, then masked."""
        row = np.asarray(logits, np.float32)
        if self.params.logit_bias:
            row = row + self._bias_for(row.size)
        if self.constraint is not None:
            row = np.where(self.constraint.allowed(row.size), row, np.float32(-np.inf))
        return row

    def _bias_for(self, width: int) -> np.ndarray:
        if self._bias is None or self._bias.size != width:
            self._bias = np.zeros(width, np.float32)
            for token, bias in self.params.logit_bias:
                if token < width:  # ids were checked against the tokenizer; a narrower head has no such logit
                    self._bias[token] += bias
        return self._bias


def sampler_for(params: SamplingParams, constraint: TokenConstraint | None) -> Sampler:
    """The plain sampler unless the sequence's logits are shaped."""
    if constraint is None and not params.logit_bias:
        return Sampler(params)
    return ShapedSampler(params, constraint)
