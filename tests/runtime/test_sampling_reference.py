"""The reference meaning of device sampling (luminal/runtime/sampling.py), against the host sampler: greedy is
the host's argmax, sampled draws follow the exact tempered / top-k / top-p distributions (chi-square), a draw
depends only on its key and counter, and the log-probabilities are the host's."""

import numpy as np
import pytest

from luminal.runtime.sampling import RowSampling, choose_row, choose_rows, pack_allowed, uniforms
from luminal.scheduler.generation.logprobs import token_logprob
from luminal.scheduler.generation.sampling import Sampler, SamplingParams
from tests.runtime.sampling_cases import ROW, SETTINGS, VOCAB, assert_drawn_from, draws_of


def test_greedy_is_the_host_samplers_choice():
    rng = np.random.default_rng(1)
    host = Sampler(SamplingParams(max_tokens=1, temperature=0))
    for _ in range(50):
        row = rng.normal(size=300).astype(np.float32)
        assert choose_row(row, RowSampling(0.0)) == host.choose(row)
    tied = np.array([1.0, 3.0, 3.0, 2.0], np.float32)
    assert choose_row(tied, RowSampling(0.0)) == host.choose(tied) == 1  # the lowest id of a tie


@pytest.mark.parametrize("setting", SETTINGS)
def test_draws_follow_the_exact_distribution(setting):
    logits, rows = draws_of(setting)
    assert_drawn_from(choose_rows(logits, rows).tokens, setting)


def test_a_draw_depends_only_on_its_key_and_counter():
    row = RowSampling(1.0, key=123, counter=5)
    alone = choose_row(ROW, row)
    others = [RowSampling(0.7, 0.9, 3, key=k, counter=c) for k, c in ((1, 5), (123, 6), (9, 0))]
    batch = choose_rows(np.repeat(ROW[None], 4, axis=0), [*others[:2], row, others[2]]).tokens
    assert batch[2] == alone
    assert len({choose_row(ROW, RowSampling(1.0, key=123, counter=c)) for c in range(40)}) > 3  # they do vary
    u = uniforms(123, 5, 10_000)
    assert u.dtype == np.float32 and 0 < u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01


def test_a_seed_beyond_64_bits_or_negative_is_taken_modulo_2_to_the_64():
    wrapped = RowSampling(1.0, key=2**64 - 1, counter=3)
    assert choose_row(ROW, RowSampling(1.0, key=-1, counter=3)) == choose_row(ROW, wrapped)


def test_top_k_keeps_every_token_tied_with_the_kth():
    row = np.array([5.0, 4.0, 4.0, 4.0, 1.0], np.float32)
    drawn = {choose_row(row, RowSampling(1.0, top_k=2, key=3, counter=c)) for c in range(400)}
    assert drawn == {0, 1, 2, 3}  # as Hugging Face's top-k keeps ties with the k-th value


def test_the_allowed_bitmask_and_the_bias_apply_before_choosing():
    allowed = np.zeros((1, VOCAB), bool)
    allowed[0, [2, 9]] = True
    words = pack_allowed(allowed)
    assert words.shape == (1, 1) and words.dtype == np.uint32 and int(words[0, 0]) == (1 << 2) | (1 << 9)
    drawn = {choose_row(ROW, RowSampling(1.5, key=1, counter=c), allowed=words[0]) for c in range(200)}
    assert drawn == {2, 9}
    bias = np.zeros(VOCAB, np.float32)
    bias[4] = 100.0
    assert choose_row(ROW, RowSampling(0.0), bias=bias) == 4
    assert choose_row(ROW, RowSampling(0.0), allowed=pack_allowed(np.zeros((1, VOCAB), bool))[0]) == -1


def test_logprobs_are_the_host_ones():
    chosen = choose_rows(ROW[None], [RowSampling(0.9, key=4, counter=0, logprobs=5)])
    token = int(chosen.tokens[0])
    host = token_logprob(ROW, token, 5)
    assert chosen.logprobs[0] == pytest.approx(host.logprob, abs=1e-5)
    assert [t for t, _ in host.top] == chosen.top_ids[0].tolist()
    np.testing.assert_allclose(chosen.top_logprobs[0], [lp for _, lp in host.top], atol=1e-5)
