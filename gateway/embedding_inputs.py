"""The token ids an embedding deployment runs, from texts (tokenized with the tokenizer its package carries) or
from token ids as given: each checked against the model's vocabulary and length, as both the OpenAI route and the
Open Inference Protocol's text inputs take them."""

from __future__ import annotations

from tokenizers import Encoding, Tokenizer

from luminal.gateway.openai_errors import OpenAIError


def token_sequences(
    inputs: list[str] | list[list[int]], truncate: bool, tokenizer: Tokenizer, limit: int
) -> list[list[int]]:
    """Each input's token ids: text tokenized with the model's special tokens ([CLS] ... [SEP]), ids as given;
    one longer than `limit` is cut to it when `truncate` is asked for, and refused otherwise."""
    if isinstance(inputs[0], str):
        encodings = tokenizer.encode_batch(inputs)
        if truncate:
            encodings = [_truncated(tokenizer, text, limit) if len(e.ids) > limit else e
                         for text, e in zip(inputs, encodings, strict=True)]  # fmt: skip
        sequences = [e.ids for e in encodings]
    else:
        _check_vocabulary(inputs, tokenizer.get_vocab_size())
        sequences = [ids[:limit] for ids in inputs] if truncate else inputs
    too_long = next((k for k, s in enumerate(sequences) if len(s) > limit), None)
    if too_long is not None:
        where = f"input[{too_long}]" if len(inputs) > 1 else "input"
        message = (f"{where} has {len(sequences[too_long])} tokens; this model's maximum is {limit} "
                   '(send "truncate": true to cut longer inputs to it)')  # fmt: skip
        raise OpenAIError(400, message, "input", "context_length_exceeded")
    return sequences


def _truncated(tokenizer: Tokenizer, text: str, limit: int) -> Encoding:
    """As transformers truncates: the text's tokens cut so that they and the special tokens fit `limit`."""
    encoding = tokenizer.encode(text, add_special_tokens=False)
    encoding.truncate(limit - tokenizer.num_special_tokens_to_add(False))
    return tokenizer.post_process(encoding)


def _check_vocabulary(inputs: list[list[int]], vocab: int) -> None:
    for k, ids in enumerate(inputs):
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            where = f"input[{k}]" if len(inputs) > 1 else "input"
            raise OpenAIError(400, f"{where}: token ids {bad[:5]} are outside the vocabulary (0..{vocab - 1})", "input")
