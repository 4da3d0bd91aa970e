"""Choosing the next token of each sequence from a program's logits, where the logits are.

`HostChooser`: numpy logits, each row chosen by its sequence's Sampler (sampling.py) and its log-probabilities
computed on the host (logprobs.py): the CPU path. `DeviceChooser`: logits on a CUDA device, every row chosen by
the device sampler in one launch (runtime/cuda/sampler.py; its meaning: luminal/runtime/sampling.py); only token
ids, and the log-probabilities of rows that ask, come back. A seeded sequence's draws there come from a counter-based
generator keyed by its seed and the token's index, not from the host's numpy stream: the same seed gives other
tokens on a CUDA worker than on a CPU one. Rows for which `needs_host_logits` says so (a per-sequence rule the
device sampler cannot apply) are chosen on the host from their logits copied back; `constraints` gives a row an
additive bias [vocab] and / or an allowed-token mask [vocab] (bools) that the device sampler applies before
choosing (logit_bias, grammar masks): both are sent for the whole batch the step any row has one.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Rows
from typing import Any

import numpy as np

from luminal.runtime.cuda.sampler import CudaSampler
from luminal.runtime.sampling import Chosen, RowSampling, pack_allowed
from luminal.scheduler.generation.logit_shaping import shaped_rows, shaping_constraints
from luminal.scheduler.generation.logprobs import TokenLogprob, token_logprob
from luminal.scheduler.generation.memory_space import DeviceMemory, HostMemory
from luminal.scheduler.generation.sequence import Sequence

Choice = tuple[int, TokenLogprob | None]
# (sequence, logits width) -> (bias, allowed), None: none
Constraints = Callable[[Sequence, int], tuple[np.ndarray | None, np.ndarray | None]]


def no_constraints(seq: Sequence, width: int) -> tuple[None, None]:
    return None, None


class HostChooser:
    bytes_in = bytes_out = 0  # the logits are where the choosing is: nothing crosses

    def choose(self, sequences: Rows[Sequence], logits: np.ndarray, rows: Rows[int] | None = None) -> list[Choice]:
        """Sequence i's token from logits row `rows[i]` (default i) of [n, vocab]."""
        logits = np.asarray(logits)
        rows = list(range(len(sequences))) if rows is None else list(rows)
        shaped = shaped_rows(sequences, logits, rows)  # the biased and masked rows, shaped together
        choices = []
        for i, (seq, r) in enumerate(zip(sequences, rows)):
            token = seq.sampler.choose(logits[r]) if i not in shaped else seq.sampler.choose_shaped(shaped[i])
            top = seq.params.logprobs
            choices.append((token, None if top is None else token_logprob(logits[r], token, top)))
        return choices


class DeviceChooser:
    def __init__(self, sampler: CudaSampler, needs_host_logits: Callable[[Sequence], bool] = lambda seq: False,
                 constraints: Constraints = no_constraints):  # fmt: skip
        self.sampler, self.needs_host_logits, self.constraints = sampler, needs_host_logits, constraints
        self.host = HostChooser()
        self.fallback_bytes = 0  # logits copied back for rows chosen on the host

    @property
    def bytes_in(self) -> int:
        """Host -> device bytes: the rows' sampling parameters (and logits that were on the host)."""
        return self.sampler.bytes_in

    @property
    def bytes_out(self) -> int:
        """Device -> host bytes: token ids, asked-for log-probabilities, logits of rows chosen on the host."""
        return self.sampler.bytes_out + self.fallback_bytes

    def choose(self, sequences: Rows[Sequence], logits: Any, rows: Rows[int] | None = None) -> list[Choice]:
        """Sequence i's token from row `rows[i]` (default i) of the device logits [n, vocab] (host ones are copied
        over)."""
        rows = list(range(len(sequences))) if rows is None else list(rows)
        on_host = [i for i, seq in enumerate(sequences) if self.needs_host_logits(seq)]
        on_device = [i for i in range(len(sequences)) if i not in set(on_host)]
        choices: list[Choice | None] = [None] * len(sequences)
        if on_device:
            params = [row_sampling(sequences[i]) for i in on_device]
            width = logits.shape[1]
            bias, allowed = _dense([self.constraints(sequences[i], width) for i in on_device], width)
            chosen = self.sampler.choose(logits, params, bias, allowed, logits_rows=[rows[i] for i in on_device])
            for j, i in enumerate(on_device):
                choices[i] = _choice(chosen, j, sequences[i].params.logprobs)
        if on_host:
            host = logits if isinstance(logits, np.ndarray) else logits.get()
            self.fallback_bytes += 0 if isinstance(logits, np.ndarray) else host.nbytes
            picked = self.host.choose([sequences[i] for i in on_host], host, [rows[i] for i in on_host])
            for i, choice in zip(on_host, picked):
                choices[i] = choice
        return choices


def row_sampling(seq: Sequence) -> RowSampling:
    """The device sampler's parameters for `seq`'s next token: its settings, its generator key and the token's
    index as the draw's counter."""
    p = seq.params
    top_k = p.top_k if p.top_k and p.top_k > 0 else 0
    logprobs = -1 if p.logprobs is None else p.logprobs
    return RowSampling(p.temperature, p.top_p, top_k, seq.sampler.key, len(seq.tokens), logprobs)


def _dense(constraints: list[tuple], vocab: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The rows' biases as one float32 [rows, vocab] (zeros where a row has none) and their masks as one packed
    bitmask (every token allowed where a row has none); None for either that no row has."""
    biases, masks = zip(*constraints) if constraints else ((), ())
    bias = None
    if any(b is not None for b in biases):
        bias = np.stack([np.zeros(vocab, np.float32) if b is None else np.asarray(b, np.float32) for b in biases])
    allowed = None
    if any(m is not None for m in masks):
        allowed = pack_allowed(np.stack([np.ones(vocab, bool) if m is None else np.asarray(m, bool) for m in masks]))
    return bias, allowed


def _choice(chosen: Chosen, j: int, top: int | None) -> Choice:
    token = int(chosen.tokens[j])
    if token < 0:  # only an allowed-token bitmask that allows nothing gets here
        raise ValueError("no token is allowed for this sequence's next position")
    if top is None:
        return token, None
    alternatives = tuple((int(t), float(lp)) for t, lp in zip(chosen.top_ids[j, :top], chosen.top_logprobs[j, :top]))
    return token, TokenLogprob(token, float(chosen.logprobs[j]), alternatives)


def choose_each(chooser: HostChooser | DeviceChooser, items: Rows[tuple[Sequence, Any, int]]) -> list[Choice]:
    """Choices for (sequence, logits, row) items whose rows lie in several logits arrays (a chunked-prefill round
    of several runs): one call per array."""
    choices: list[Choice | None] = [None] * len(items)
    arrays: dict[int, list[int]] = {}
    for i, (_, logits, _) in enumerate(items):
        arrays.setdefault(id(logits), []).append(i)
    for members in arrays.values():
        logits = items[members[0]][1]
        picked = chooser.choose([items[i][0] for i in members], logits, [items[i][2] for i in members])
        for i, choice in zip(members, picked):
            choices[i] = choice
    return choices


def chooser_for(memory: HostMemory | DeviceMemory) -> HostChooser | DeviceChooser:
    """Where the logits of programs run in `memory` are chosen from: the device sampler, on that memory's device."""
    if not memory.on_device:
        return HostChooser()
    with memory.device:
        return DeviceChooser(CudaSampler(memory.cp), constraints=shaping_constraints)
