"""The text of a growing list of generated tokens, decoding only its last few tokens per new token.

Decoding the whole list after every token costs O(n) per token, O(n^2) for a completion. Instead (as vLLM and
TGI do) the tokens already turned into final text are kept as text, and each new token is decoded together with
a few tokens before it (the context, `tokens[prefix:read]`): the new text is what decoding the window adds to
decoding its context alone. The context matters for tokenizers whose decode of a suffix differs from its part of
the whole (SentencePiece drops a leading space; byte-level BPE splits characters across tokens). While the
window ends in an incomplete character (U+FFFD) its text stays provisional and the window grows; once it is
whole it becomes final and the next window's context starts where this one's new tokens did. A decoder that
rewrites a context's text for good (rare) gets the whole list decoded, that once.
"""

from __future__ import annotations

from collections.abc import Callable

REPLACEMENT = "\ufffd"  # what a decoder yields for a character whose bytes have not all arrived


class IncrementalText:
    def __init__(self, decode: Callable[[list[int]], str]):
        self._decode = decode
        self.text = ""  # decode(tokens) of the last update
        self.final = ""  # decode(tokens[:read]): final, the start of every later text (unless a decoder rewrites)
        self._prefix = self._read = 0
        self._context: str | None = None  # decode(tokens[prefix:read]), once computed
        self.decoded_tokens = 0  # tokens handed to decode, all calls together: tests read it

    def update(self, tokens: list[int]) -> str:
        """decode(tokens), `tokens` being the list of the previous call with tokens appended."""
        if self._context is None:
            self._context = self._decode_counted(tokens[self._prefix : self._read])
        window = self._decode_counted(tokens[self._prefix :])
        if not window.startswith(self._context) and window.endswith(REPLACEMENT) and self.final.endswith(self._context):
            # An incomplete character spoiled its context too (SentencePiece's byte fallback turns a whole run of
            # byte tokens into U+FFFD while one is invalid): provisional text, all held back, until it completes.
            self.text = self.final[: len(self.final) - len(self._context)] + window
            return self.text
        if not window.startswith(self._context):  # the new tokens rewrote their context: decode all, this once
            self.text = self._decode_counted(tokens)
            if not self.text.endswith(REPLACEMENT):
                self.final, self._context = self.text, None
                self._prefix, self._read = len(tokens) - 1, len(tokens)
            return self.text
        pending = window[len(self._context) :]
        self.text = self.final + pending
        if not pending.endswith(REPLACEMENT):
            self.final, self._context = self.text, None
            self._prefix, self._read = self._read, len(tokens)
        return self.text

    def _decode_counted(self, ids: list[int]) -> str:
        self.decoded_tokens += len(ids)
        return self._decode(ids)
