"""Grammar masks computed ahead and applied together: a batch of constrained sequences chooses the same tokens with its
masks computed on the mask thread as with each computed when its row is read; the rows shaped together for a batch
(plain, biased, constrained, both; a padded head) give the tokens each sampler gives alone, a greedy row whose best
token is allowed left unmasked; a constraint whose mask is being computed elsewhere is not stepped until that job
ends; masks of different vocabularies do not unpack together; a closed prefetch computes nothing (each mask is
computed where it is read)."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import numpy as np
import pytest

from luminal.scheduler.generation.choosers import HostChooser
from luminal.scheduler.generation.grammar import JSON_SCHEMA, allowed_rows, grammar_request
from luminal.scheduler.generation.logit_shaping import shaped_rows
from luminal.scheduler.generation.mask_prefetch import MaskPrefetch
from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.sequence import Sequence
from luminal.scheduler.generation.tokenizer import TextCodec
from tests.json_schemas import PERSON
from tests.scheduler.random_logits import plain_codec


@pytest.fixture(scope="module")
def codec() -> TextCodec:
    return plain_codec()


def _sequence(codec: TextCodec, **params) -> Sequence:
    return Sequence([0], SamplingParams(200, **params), codec.decode, codec.eos_token_ids, grammars=codec.grammars)


def _batch(codec: TextCodec) -> list[Sequence]:
    """Constrained sequences, greedy and seeded, beside a plain one and a biased one."""
    schema = grammar_request(JSON_SCHEMA, PERSON)
    bias = ((codec.tokenizer.token_to_id("{"), 5.0),)
    return [
        _sequence(codec, temperature=0.0, response_format=schema),
        _sequence(codec, temperature=1.0, seed=1),
        _sequence(codec, temperature=1.0, seed=2, response_format=schema, logit_bias=bias),
        _sequence(codec, temperature=0.0, logit_bias=bias),
        _sequence(codec, temperature=0.7, seed=3, response_format=schema),
    ]


def _decode(codec: TextCodec, prefetch: MaskPrefetch | None) -> list[list[int]]:
    """The batch decoded from seeded random logits, masks computed ahead after each step when `prefetch` is given."""
    seqs, chooser, rng = _batch(codec), HostChooser(), np.random.default_rng(7)
    vocab = codec.tokenizer.get_vocab_size()
    running = list(seqs)
    while running:
        logits = rng.normal(scale=3.0, size=(len(running), vocab)).astype(np.float32)
        for seq, (token, _) in zip(running, chooser.choose(running, logits)):
            seq.add(token)
        running = [s for s in running if not s.finished]
        if prefetch is not None:
            prefetch.start([s.constraint for s in running if s.constraint is not None])
    return [s.tokens for s in seqs]


def test_masks_computed_ahead_choose_what_masks_computed_in_place_choose(codec):
    prefetch = MaskPrefetch()
    try:
        ahead = _decode(codec, prefetch)
    finally:
        prefetch.close()
    assert ahead == _decode(codec, None)
    assert any(len(tokens) > 10 for tokens in ahead)  # the grammar ran for a while, not one token


@pytest.mark.parametrize("padding", [0, 8])
def test_rows_shaped_together_choose_what_each_sampler_chooses_alone(codec, padding):
    seqs, twins = _batch(codec), _batch(codec)  # twins: their seeded generators draw what seqs' draw
    width = codec.tokenizer.get_vocab_size() + padding
    logits = np.random.default_rng(3).normal(size=(len(seqs) + 1, width)).astype(np.float32)
    rows = [5, 0, 2, 1, 3]
    shaped = shaped_rows(seqs, logits, rows)
    assert sorted(shaped) == [0, 2, 3, 4]  # the plain sequence's row is left as it is
    for i, row in shaped.items():
        alone = seqs[i].sampler.shape(logits[rows[i]])
        assert seqs[i].sampler.choose_shaped(row) == twins[i].sampler.choose_shaped(alone)
        if seqs[i].params.temperature > 0:  # a sampled row is the whole shaped row
            np.testing.assert_array_equal(row, alone)
    assert not np.isneginf(logits).any()  # the logits themselves are untouched


def test_a_greedy_row_whose_best_token_is_allowed_is_not_masked(codec):
    """'{' opens every JSON answer: a greedy row whose highest logit is '{' needs no mask, and one whose highest is
    a letter is masked and still chooses '{'."""
    seq = _sequence(codec, temperature=0.0, response_format=grammar_request(JSON_SCHEMA, PERSON))
    vocab = codec.tokenizer.get_vocab_size()
    brace, letter = codec.tokenizer.token_to_id("{"), codec.tokenizer.token_to_id("x")
    logits = np.zeros((2, vocab), np.float32)
    logits[0, brace] = logits[1, letter] = 5.0
    logits[1, brace] = 1.0
    for r, masked in ((0, False), (1, True)):
        [row] = shaped_rows([seq], logits, [r]).values()
        assert np.isneginf(row).any() == masked
        assert seq.sampler.choose_shaped(row) == brace


def test_a_constraint_is_not_stepped_while_its_mask_is_computed_elsewhere(codec):
    seq = _sequence(codec, temperature=0.0, response_format=grammar_request(JSON_SCHEMA, PERSON))
    job: Future = Future()
    seq.constraint.expect(job)
    stepping = threading.Thread(target=seq.constraint.advance, args=(codec.tokenizer.token_to_id("{"),))
    stepping.start()
    stepping.join(timeout=0.2)
    assert stepping.is_alive()  # waiting for the job
    seq.constraint.compute_mask()
    job.set_result(None)
    stepping.join(timeout=10)
    assert not stepping.is_alive()


def test_masks_of_different_vocabularies_do_not_unpack_together(codec):
    schema = grammar_request(JSON_SCHEMA, PERSON)
    one, other = (_sequence(codec, temperature=0.0, response_format=schema).constraint for _ in range(2))
    other.vocab += 32
    with pytest.raises(ValueError, match="one tokenizer"):
        allowed_rows([one, other], one.vocab)


def test_a_closed_prefetch_leaves_each_mask_to_be_computed_where_it_is_read(codec):
    seq = _sequence(codec, temperature=0.0, response_format=grammar_request(JSON_SCHEMA, PERSON))
    prefetch = MaskPrefetch()
    prefetch.close()
    prefetch.start([seq.constraint])  # no error: an engine thread may run one more round after its close
    assert seq.constraint.allows(codec.tokenizer.token_to_id("{"))
