"""Incremental detokenisation: the text a sequence streams equals decoding all its tokens at once, for byte-level
BPE splitting multi-byte characters across tokens and for a SentencePiece-style tokenizer whose decode of a
suffix drops its leading space; stop strings cut the same text; and a long completion's tokens are decoded a few
at a time, not all again for each new one."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

from luminal.scheduler.generation.detokenizer import REPLACEMENT, IncrementalText
from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.sequence import Sequence
from tests.llm_folders import CORPUS, train_tokenizer

# Accents (2 bytes), CJK (3 bytes), emoji (4 bytes): the tokenizers below know none, so each is split into bytes.
TEXT = "the quick brown fox — jumps över 日本語 the lazy 🙂🦊 dog, hello wörld; a compiler of few ops"


def _metaspace_tokenizer() -> Tokenizer:
    """SentencePiece's convention, as Llama's tokenizer: spaces become "▁" and decoding drops the leading one (so
    decoding a token alone loses the space before its word), and a character outside the vocabulary is spelled
    in byte tokens <0xNN>."""
    letters = sorted(set("".join(CORPUS).replace(" ", "▁")))
    vocab = {"<unk>": 0, **{f"<0x{b:02X}>": 1 + b for b in range(256)}}
    vocab |= {c: len(vocab) + i for i, c in enumerate(letters)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return tok


@pytest.fixture(scope="module", params=["byte_level", "metaspace"])
def tokenizer(request) -> Tokenizer:
    return train_tokenizer() if request.param == "byte_level" else _metaspace_tokenizer()


def _decoder(tokenizer: Tokenizer):
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=True)


def _stream(tokenizer: Tokenizer, ids: list[int], **params) -> tuple[list[str], Sequence]:
    seq = Sequence([1], SamplingParams(max_tokens=params.pop("max_tokens", len(ids)), **params), _decoder(tokenizer))
    pieces = []
    for token in ids:
        pieces.append(seq.add(token))
        if seq.finished:
            break
    return pieces, seq


def test_the_streamed_text_is_the_whole_decode(tokenizer):
    ids = tokenizer.encode(TEXT).ids
    whole = tokenizer.decode(ids, skip_special_tokens=True)
    assert "日本語" in whole and " jumps" in whole
    pieces, seq = _stream(tokenizer, ids)
    assert "".join(pieces) == seq.text == whole and seq.finish_reason == "length"
    assert not any(REPLACEMENT in p for p in pieces)  # a character leaves whole, once its last byte is in
    split = [i for i in range(1, len(ids)) if REPLACEMENT in tokenizer.decode(ids[:i])]
    assert split, "the text must split some character across tokens to test anything"


def test_every_prefix_of_byte_level_tokens_decodes_as_whole():
    """Byte-level BPE decodes bytes with one U+FFFD per incomplete character, so even the provisional text of a
    prefix ending inside a character is the whole decode. (SentencePiece's byte fallback spoils a whole run of
    byte tokens then: that provisional text differs, and is held back all the same.)"""
    tokenizer = train_tokenizer()
    ids = tokenizer.encode(TEXT).ids
    text = IncrementalText(_decoder(tokenizer))
    for n in range(1, len(ids) + 1):
        assert text.update(ids[:n]) == tokenizer.decode(ids[:n], skip_special_tokens=True)


@pytest.mark.parametrize("stop", ["日本", "lazy 🙂", "wörld;"])
def test_stop_strings_cut_the_same_text(tokenizer, stop):
    ids = tokenizer.encode(TEXT).ids
    whole = tokenizer.decode(ids, skip_special_tokens=True)
    pieces, seq = _stream(tokenizer, ids, stop=(stop,))
    assert seq.finish_reason == "stop" and "".join(pieces) == seq.text == whole[: whole.index(stop)]


def test_a_long_completions_tokens_are_decoded_a_few_at_a_time(tokenizer):
    ids = tokenizer.encode(TEXT).ids * 40  # over 2000 tokens
    calls = []

    def counted(batch):
        calls.append(len(batch))
        return tokenizer.decode(batch, skip_special_tokens=True)

    seq = Sequence([1], SamplingParams(max_tokens=len(ids)), counted)
    for token in ids:
        seq.add(token)
    assert seq.text == tokenizer.decode(ids, skip_special_tokens=True)
    assert len(calls) <= 2 * len(ids) and max(calls) <= 8  # whole decodes: len(ids) calls of up to len(ids)
    assert seq.detokenizer.decoded_tokens == sum(calls) <= 8 * len(ids)


def test_a_decoder_that_rewrites_its_context_still_gives_the_whole_decode():
    """A decode whose text for a window is not its context's text plus more (here: the count of tokens first):
    the whole list is decoded instead, so the text stays exact."""
    decode = lambda ids: f"{len(ids)}:" + "".join(chr(97 + i % 26) for i in ids)  # noqa: E731
    text = IncrementalText(decode)
    for n in range(1, 30):
        assert text.update(list(range(n))) == decode(list(range(n)))
