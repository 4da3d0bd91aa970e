"""Token logprobs in the two shapes the `openai` client parses: the legacy completions object (`tokens`,
`token_logprobs`, `top_logprobs` as {token: logprob}, `text_offset`) and chat's `content` list (`token`,
`logprob`, `bytes`, `top_logprobs` as a list). A streamed answer formats each chunk's tokens with the same
object, so text offsets run on across chunks and the pieces join to the non-streamed answer."""

from __future__ import annotations

from typing import Any

from luminal.scheduler.generation.logprobs import TokenLogprob
from luminal.scheduler.generation.tokenizer import TextCodec


class CompletionLogprobs:
    def __init__(self, codec: TextCodec):
        self.codec = codec
        self.offset = 0  # characters of token text before the next token

    def __call__(self, items: list[TokenLogprob]) -> dict[str, Any]:
        tokens, offsets = [], []
        for item in items:
            text = self.codec.token_text(item.token)
            tokens.append(text)
            offsets.append(self.offset)
            self.offset += len(text)
        return {
            "tokens": tokens,
            "token_logprobs": [item.logprob for item in items],
            "top_logprobs": [{self.codec.token_text(t): lp for t, lp in item.top} for item in items],
            "text_offset": offsets,
        }


class ChatLogprobs:
    def __init__(self, codec: TextCodec):
        self.codec = codec

    def _entry(self, token: int, logprob: float) -> dict[str, Any]:
        text = self.codec.token_text(token)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    def __call__(self, items: list[TokenLogprob]) -> dict[str, Any]:
        content = [
            {**self._entry(item.token, item.logprob), "top_logprobs": [self._entry(t, lp) for t, lp in item.top]}
            for item in items
        ]
        return {"content": content, "refusal": None}
