"""Sequences driven without a model: random logits (a model that knows nothing of any format) choose each token,
so whatever structure the text has comes from its grammar. Shared by the grammar and tool-call tests."""

from __future__ import annotations

import numpy as np

from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.sequence import Sequence
from luminal.scheduler.generation.tokenizer import TextCodec
from tests.llm_folders import EOS, train_tokenizer


def plain_codec() -> TextCodec:
    """The test tokenizer's codec, its end of sequence the only stop."""
    tokenizer = train_tokenizer()
    return TextCodec(tokenizer, {"eos_token": EOS}, None, frozenset({tokenizer.token_to_id(EOS)}))


def driven(codec: TextCodec, params: SamplingParams, seed: int, pieces: list[str] | None = None) -> Sequence:
    """The sequence driven to its end by random logits; `pieces` gets the text each token made final."""
    seq = Sequence([0], params, codec.decode, codec.eos_token_ids, grammars=codec.grammars)
    rng = np.random.default_rng(seed)
    vocab = codec.tokenizer.get_vocab_size()
    while not seq.finished:
        piece = seq.add(seq.sampler.choose(rng.normal(scale=3.0, size=vocab).astype(np.float32)))
        if pieces is not None:
            pieces.append(piece)
    return seq
