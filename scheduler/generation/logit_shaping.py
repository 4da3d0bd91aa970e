"""What changes a sequence's logits before its sampler chooses: OpenAI's `logit_bias` (added to the logits of the named
tokens) and a grammar's token mask (every token it forbids gets -inf). Both happen only in the sampling of the
sequences that asked: a sequence without them keeps the plain `Sampler`, so an unconstrained neighbour in the same
batch does no extra work. On the host the rows of a batch's shaped sequences are shaped together (`shaped_rows`: one
unpacking of their packed masks, one masking). The greedy choice and the sampled one both see the shaped row;
logprobs stay those of the model's own logits (the engine computes them from the row it was given). On a device, the
same bias and mask go to the device sampler through `shaping_constraints` (choosers.py) and the host's sampler is
not used."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from luminal.scheduler.generation.grammar import TokenConstraint, allowed_rows
from luminal.scheduler.generation.sampling import Sampler, SamplingParams

if TYPE_CHECKING:  # sequence.py makes its sampler here
    from luminal.scheduler.generation.sequence import Sequence


class ShapedSampler(Sampler):
    def __init__(self, params: SamplingParams, constraint: TokenConstraint | None):
        super().__init__(params)
        self.constraint = constraint
        self._bias: np.ndarray | None = None  # built on the first row, once its width (the model's vocab) is known

    def choose(self, logits: np.ndarray) -> int:
        return super().choose(self.shape(logits))

    def choose_shaped(self, row: np.ndarray) -> int:
        """The next token from a row that is shaped already (`shaped_rows`)."""
        return super().choose(row)

    def shape(self, logits: np.ndarray) -> np.ndarray:
        """The row the sampler chooses from: biased, then masked."""
        row = np.asarray(logits, np.float32)
        bias, allowed = self.constraints(row.size)
        if bias is not None:
            row = row + bias
        if allowed is not None:
            row = np.where(allowed, row, np.float32(-np.inf))
        return row

    def constraints(self, width: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The next token's additive bias [width] and allowed-token mask [width] (None: none), as the device
        sampler takes them (choosers.py) and `shape` applies them on the host."""
        bias = self.bias_for(width) if self.params.logit_bias else None
        return bias, None if self.constraint is None else self.constraint.allowed(width)

    def bias_for(self, width: int) -> np.ndarray:
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


def shaped_rows(sequences: list[Sequence], logits: np.ndarray, rows: list[int]) -> dict[int, np.ndarray]:
    """The rows the shaped sequences' samplers choose from, by index in `sequences` (sequence i's logits are row
    `rows[i]` of [n, width]): as `ShapedSampler.shape` makes them, with every mask applied in one operation, except
    that a greedy row whose highest logit is allowed is not masked (the choice is the same). Plain sequences have
    none: their rows are used as they are."""
    shaped = [i for i, seq in enumerate(sequences) if isinstance(seq.sampler, ShapedSampler)]
    if not shaped:
        return {}
    width = logits.shape[1]
    block = np.asarray(logits[[rows[i] for i in shaped]], np.float32)  # indexing copies: the logits stay as they are
    samplers = [sequences[i].sampler for i in shaped]
    for j, sampler in enumerate(samplers):
        if sampler.params.logit_bias:
            block[j] += sampler.bias_for(width)
    # A greedy row whose highest logit its grammar allows gives that token masked or not: it is left as it is.
    masked = [j for j, s in enumerate(samplers) if s.constraint is not None and not _greedy_choice_allowed(s, block[j])]
    if masked:
        allowed = allowed_rows([samplers[j].constraint for j in masked], width)
        block[masked] = np.where(allowed, block[masked], np.float32(-np.inf))
    return dict(zip(shaped, block))


def _greedy_choice_allowed(sampler: ShapedSampler, row: np.ndarray) -> bool:
    """Whether a greedy sampler's token from the unmasked row is one its grammar allows: then the masked row gives
    the same token (the first of the highest logits stays; masking only lowers others)."""
    return sampler.params.temperature == 0 and sampler.constraint.allows(int(np.argmax(row)))


def shaping_constraints(seq: Sequence, width: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """A sequence's (bias, allowed mask) for a device sampler's row of `width` logits: none for a plain one."""
    sampler = seq.sampler
    return sampler.constraints(width) if isinstance(sampler, ShapedSampler) else (None, None)
