"""Choosing tokens where the logits are: the device chooser gives a batch's rows to the device sampler (through
the CuPy stand-in), picks any rows of a logits array, and leaves the rows that need host logits to each
sequence's own host Sampler; the host chooser is the CPU path's Sampler and logprobs."""

import numpy as np
import pytest

from luminal.runtime.sampling import RowSampling, choose_rows
from luminal.scheduler.generation.choosers import DeviceChooser, HostChooser, choose_each, row_sampling
from luminal.scheduler.generation.logprobs import token_logprob
from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.sequence import Sequence
from tests.runtime.cuda import fake_cupy
from tests.runtime.cuda.fake_sampler import shim_sampler

pytestmark = pytest.mark.needs("g++")
LOGITS = np.random.default_rng(5).normal(size=(4, 50)).astype(np.float32) * 3


def _sequence(**params) -> Sequence:
    return Sequence([1, 2], SamplingParams(max_tokens=4, **params), lambda tokens: "")


def test_device_rows_follow_the_reference_and_host_rows_their_own_sampler():
    chooser = DeviceChooser(shim_sampler(32), needs_host_logits=lambda seq: seq.params.top_k == 7)
    seqs = [_sequence(temperature=0.8, seed=3), _sequence(temperature=0.8, seed=3, top_k=7), _sequence(temperature=0)]
    twin = _sequence(temperature=0.8, seed=3, top_k=7)  # its host Sampler draws what the flagged row's draws
    choices = chooser.choose(seqs, fake_cupy.asarray(LOGITS), rows=[2, 0, 3])
    assert choices[1] == (twin.sampler.choose(LOGITS[0]), None)
    assert chooser.bytes_out == LOGITS.nbytes + 2 * 8  # the logits came back once, for that row; two token ids
    want = choose_rows(LOGITS, [row_sampling(seqs[0]), row_sampling(seqs[2])], logits_rows=[2, 3])
    assert [choices[0][0], choices[2][0]] == want.tokens.tolist()
    assert row_sampling(seqs[0]) == RowSampling(
        0.8, 1.0, 0, 3, 0, -1
    )  # the seed is the key, the token index the counter


def test_host_chooser_is_the_samplers_choice_with_its_logprobs():
    seq = _sequence(temperature=0, logprobs=3)
    [(token, logprob)] = HostChooser().choose([seq], LOGITS, rows=[1])
    assert token == int(np.argmax(LOGITS[1])) and logprob == token_logprob(LOGITS[1], token, 3)


def test_choose_each_groups_rows_by_their_logits_array():
    first, second = LOGITS[:2].copy(), LOGITS[2:].copy()
    seqs = [_sequence(temperature=0) for _ in range(3)]
    choices = choose_each(HostChooser(), [(seqs[0], first, 1), (seqs[1], second, 0), (seqs[2], first, 0)])
    assert [c[0] for c in choices] == [int(np.argmax(LOGITS[r])) for r in (1, 2, 0)]


def test_constraints_bias_and_mask_the_rows_that_have_them():
    bias = np.zeros(50, np.float32)
    bias[7] = 100.0
    allowed = np.zeros(50, bool)
    allowed[[11, 12]] = True
    rules = {0: (bias, None), 1: (None, allowed), 2: (None, None)}
    seqs = [_sequence(temperature=0, seed=k) for k in range(3)]
    chooser = DeviceChooser(shim_sampler(32), constraints=lambda seq: rules[seq.params.seed])
    choices = chooser.choose(seqs, fake_cupy.asarray(LOGITS[:3]))
    assert choices[0][0] == 7 and choices[1][0] == 11 + int(LOGITS[1, 12] > LOGITS[1, 11])
    assert choices[2][0] == int(np.argmax(LOGITS[2]))  # a row without constraints: zero bias, every token allowed
