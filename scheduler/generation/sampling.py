"""How one sequence picks its next token: greedy at temperature 0, otherwise drawn as Hugging Face's
generate(do_sample=True) draws (tempered softmax, top-k, then the nucleus), from the sequence's own generator
so a seeded request repeats whatever else shares its batch."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np

from luminal.nn.models.generation import allowed_probabilities

MAX_TOP_LOGPROBS = 20  # OpenAI's limit on top_logprobs
MAX_LOGIT_BIAS, LOGIT_BIAS_RANGE = 300, 100.0  # OpenAI's limits: at most 300 tokens, each biased within +-100


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int | None = None  # None or 0: no limit (OpenAI-compatible servers spell "off" as -1 too)
    seed: int | None = None
    stop: tuple[str, ...] = ()  # strings that end the text; the text stops before them
    stop_token_ids: tuple[int, ...] = ()  # tokens that end the sequence besides the model's end-of-sequence
    ignore_eos: bool = False
    logprobs: int | None = None  # None: none computed; n: each token's logprob and the n most likely alternatives
    # Plain data, so the parameters cross a process boundary as JSON: the canonical text of a grammar the text must
    # follow (grammar.grammar_request; compiled where the sequence is made), and (token, bias) pairs added to the
    # logits before the choice.
    response_format: str | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()
    lora: str | None = None  # the LoRA adapter the sequence runs with, by name (None: the base model)

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if not 0 <= self.temperature <= 2:
            raise ValueError(f"temperature must lie in [0, 2], got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p}")
        if self.top_k is not None and self.top_k < -1:
            raise ValueError(f"top_k must be -1 (off), 0 (off) or positive, got {self.top_k}")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"logprobs must lie in [0, {MAX_TOP_LOGPROBS}], got {self.logprobs}")
        # JSON gives lists back: kept as tuples so the parameters stay hashable and equal to the originals.
        object.__setattr__(self, "logit_bias", tuple((int(t), float(b)) for t, b in self.logit_bias))
        if len(self.logit_bias) > MAX_LOGIT_BIAS:
            raise ValueError(f"logit_bias may name at most {MAX_LOGIT_BIAS} tokens, got {len(self.logit_bias)}")
        for token, bias in self.logit_bias:
            if token < 0 or not -LOGIT_BIAS_RANGE <= bias <= LOGIT_BIAS_RANGE:
                limit = f"[-{LOGIT_BIAS_RANGE:g}, {LOGIT_BIAS_RANGE:g}]"
                raise ValueError(f"logit_bias {token}: {bias} needs a token id >= 0 and a bias in {limit}")


class Sampler:
    def __init__(self, params: SamplingParams):
        self.params = params
        self.rng = np.random.default_rng(params.seed)
        # The device sampler's generator key (choosers.py): the seed, so a seeded request repeats; else random.
        self.key = params.seed if params.seed is not None else secrets.randbits(63)

    def choose(self, logits: np.ndarray) -> int:
        """The next token from one row of logits [vocab]."""
        p = self.params
        if p.temperature == 0:
            return int(np.argmax(logits))
        top_k = p.top_k if p.top_k and p.top_k > 0 else None
        probs = allowed_probabilities(logits[None], p.temperature, top_k, p.top_p)[0]
        return int(self.rng.choice(len(probs), p=probs))
