"""One sequence being generated: its tokens, its text, and when it ends.

Text leaves as it becomes final. The generated tokens' text is what decoding them all gives (byte-level tokenizers
split characters across tokens, so decoding token by token would emit broken UTF-8), computed incrementally, a
few tokens per new one (detokenizer.py); text that could still turn into a stop string, or that ends in an
incomplete character, is held back until it cannot. A stop string ends the text just before it (OpenAI's rule:
the stop sequence is not returned). A sequence with a grammar (`params.response_format`) gets its matcher from
`grammars` (the model's compiler, which caches each grammar by its text) as it is made; each token it takes
advances the matcher, and the sequence ends ("stop") the token its grammar is complete.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from luminal.scheduler.generation.detokenizer import REPLACEMENT, IncrementalText
from luminal.scheduler.generation.grammar import GrammarError, Grammars
from luminal.scheduler.generation.logit_shaping import sampler_for
from luminal.scheduler.generation.sampling import SamplingParams

LENGTH, STOP = "length", "stop"  # OpenAI's finish reasons


@dataclass
class Sequence:
    prompt: list[int]
    params: SamplingParams
    decode: Callable[[list[int]], str]
    eos_token_ids: frozenset[int] = frozenset()
    tokens: list[int] = field(default_factory=list)
    text: str = ""  # the final text emitted so far
    finish_reason: str | None = None
    grammars: Grammars | None = None  # needed when params.response_format is set

    def __post_init__(self) -> None:
        self.constraint = None
        if self.params.response_format is not None:
            if self.grammars is None:
                raise GrammarError("a response_format needs the model's grammar compiler")
            self.constraint = self.grammars.constraint(self.params.response_format)
        self.sampler = sampler_for(self.params, self.constraint)
        self.detokenizer = IncrementalText(self.decode)
        self._ends = frozenset(self.params.stop_token_ids) | (
            frozenset() if self.params.ignore_eos else self.eos_token_ids
        )

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def add(self, token: int) -> str:
        """Record a generated token; returns the text it makes final (maybe empty) and sets finish_reason."""
        self.tokens.append(token)
        if token in self._ends:  # its text is not the answer's: the text so far is all there is
            self.finish_reason = STOP
            body = self.detokenizer.text
            return self._emit(self._cut_at_stop(body)[0])
        body = self.detokenizer.update(self.tokens)
        body, stopped = self._cut_at_stop(body)
        if stopped or (self.constraint is not None and self.constraint.advance(token)):
            self.finish_reason = STOP
            return self._emit(body)
        if len(self.tokens) >= self.params.max_tokens:
            self.finish_reason = LENGTH
            return self._emit(body)
        return self._emit(body[: len(body) - self._held_back(body)])

    def _cut_at_stop(self, body: str) -> tuple[str, bool]:
        hits = [i for i in (body.find(s, max(0, len(self.text) - len(s))) for s in self.params.stop if s) if i >= 0]
        return (body[: min(hits)], True) if hits else (body, False)

    def _held_back(self, body: str) -> int:
        """Characters at the end of `body` that may still change: a partial character or a stop string's start."""
        whole = body.rstrip(REPLACEMENT)  # a stop string may start just before a partial character
        longest = 0
        for stop in self.params.stop:
            for n in range(min(len(stop) - 1, len(whole)), 0, -1):
                if whole.endswith(stop[:n]):
                    longest = max(longest, n)
                    break
        return len(body) - len(whole) + longest

    def _emit(self, body: str) -> str:
        if not body.startswith(self.text):  # a decoder that rewrote earlier text: emit nothing rather than lie
            return ""
        new, self.text = body[len(self.text) :], body
        return new
