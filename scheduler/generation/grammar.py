"""Constrained decoding: the tokens a sequence may take next so that its text stays a prefix of what its grammar
accepts (OpenAI's `response_format`: any JSON object, or JSON valid under a schema; a forced tool call: a Lark
grammar of the model family's call format around each function's parameter schema, gateway/openai_tools.py).

A grammar request travels as plain data, the canonical JSON text `grammar_request` makes (it is a field of
`SamplingParams`, which crosses process boundaries as JSON); each model's `Grammars` turns that text into a
matcher per sequence, compiling each distinct text once (a cache keyed by the text).

The engine is llguidance (Microsoft's Rust grammar engine). Measured with bench/grammar_masks.py on this machine
(AMD EPYC, 2 shared cores, the tiny test models' 320-token byte-level BPE, a nested schema with enum, pattern,
array, number and boolean): median mask time per token llguidance 9.6 us, xgrammar 4.9 us, outlines-core 1.2 us;
compile 1.0 ms, 9.7 ms and 12.9 ms. Every one is far below a decode step (milliseconds), so the mask time does
not decide. llguidance is chosen because it has no dependencies (xgrammar requires torch, transformers and triton
at run time), computes masks lazily from the tokenizer's trie instead of precomputing an index over the whole
vocabulary per schema (outlines-core's index build grows with the vocabulary: seconds for 128k-token tokenizers, paid
on a request's path for each new schema), and refuses a schema keyword it cannot enforce by naming it
("Unimplemented keys: [\"uniqueItems\"]"), which becomes the 400 the API owes the caller.

JSON is generated compact (no optional whitespace): a model can otherwise spend its tokens on spaces and newlines
that the grammar never forbids.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from concurrent.futures import Future
from typing import Any

import llguidance
import llguidance.numpy
import numpy as np
from tokenizers import Tokenizer

JSON_OBJECT, JSON_SCHEMA, LARK = "json_object", "json_schema", "lark"
MAX_GRAMMARS = 256  # compiled grammars kept per model: a new schema costs about a millisecond to compile again
# How llguidance compiles every schema: no optional whitespace (see the module docstring).
COMPILE_OPTIONS = {"whitespace_flexible": False}


class GrammarError(ValueError):
    """A grammar request the engine cannot enforce (an unsupported schema keyword, an invalid schema): a 400."""


def grammar_request(kind: str, schema: dict[str, Any] | None = None, lark: str | None = None) -> str:
    """The canonical text of a grammar request: `json_object` (any JSON object), `json_schema` with its schema,
    or `lark` with a Lark grammar (llguidance's dialect: `%json {schema}` embeds a schema); equal requests give
    equal texts, so the text keys the compile cache. Keys keep their order: the answer's properties come in the
    order the schema lists them."""
    if kind == JSON_OBJECT:
        return json.dumps({"type": JSON_OBJECT})
    if kind == JSON_SCHEMA:
        return json.dumps({"type": JSON_SCHEMA, "schema": schema}, separators=(",", ":"))
    if kind == LARK and isinstance(lark, str):
        return json.dumps({"type": LARK, "lark": lark}, separators=(",", ":"))
    raise GrammarError(f"unknown grammar kind {kind!r} (expected {JSON_OBJECT!r}, {JSON_SCHEMA!r} or {LARK!r})")


def _grammar_of(request: str) -> str:
    """The llguidance grammar a request text asks for."""
    try:
        parsed = json.loads(request)
    except json.JSONDecodeError as e:
        raise GrammarError(f"the grammar request is not JSON: {e}") from None
    kind = parsed.get("type") if isinstance(parsed, dict) else None
    if kind == JSON_OBJECT:
        return llguidance.LLMatcher.grammar_from_json_schema({"type": "object"}, defaults=COMPILE_OPTIONS)
    if kind == JSON_SCHEMA and isinstance(parsed.get("schema"), dict):
        return llguidance.LLMatcher.grammar_from_json_schema(parsed["schema"], defaults=COMPILE_OPTIONS)
    if kind == LARK and isinstance(parsed.get("lark"), str):
        return llguidance.LLMatcher.grammar_from_lark(parsed["lark"])
    raise GrammarError(f"not a grammar request made by grammar_request(): {request[:80]!r}")


class TokenConstraint:
    """One sequence's grammar state: which tokens may come next, advanced by each token the sequence takes. Its
    next mask may be computed ahead, on another thread (mask_prefetch.py): `expect` hands it that job, and reading
    the mask or advancing waits for the job, so the matcher is never read and stepped at once."""

    def __init__(self, matcher: llguidance.LLMatcher, vocab: int, eos_token_ids: list[int]):
        self._matcher = matcher
        self._bits = llguidance.numpy.allocate_token_bitmask(1, vocab)
        self.vocab = vocab
        self.eos = eos_token_ids
        self._ahead: Future | None = None  # the job computing the next mask on another thread, if one is
        self._current = False  # whether `_bits` holds the next token's mask (a token taken makes it stale)

    def compute_mask(self) -> None:
        """Compute the next token's packed mask (llguidance releases the GIL while it does)."""
        llguidance.numpy.fill_next_token_bitmask(self._matcher, self._bits, 0)
        self._current = True

    def expect(self, job: Future) -> None:
        """`job` computes this constraint's next mask (`compute_mask`) on another thread: wait for it instead."""
        self._ahead = job

    def bits(self) -> np.ndarray:
        """The next token's mask packed as llguidance writes it: int32 [ceil(vocab / 32)], bit t of the little-endian
        bit order for token t."""
        self._settle()
        if not self._current:
            self.compute_mask()
        return self._bits[0]

    def allows(self, token: int) -> bool:
        """Whether `token` may come next (its bit of `bits`)."""
        return token < self.vocab and bool(int(self.bits()[token >> 5]) >> (token & 31) & 1)

    def allowed(self, width: int) -> np.ndarray:
        """A bool mask over `width` logits: True where the token keeps the text inside the grammar. Tokens past
        the tokenizer's vocabulary (a model's padded embedding rows) are never allowed."""
        return allowed_rows([self], width)[0]

    def advance(self, token: int) -> bool:
        """Take `token`; True when the grammar is complete (nothing but an end of sequence may follow) or the
        token broke it: either way the sequence ends here."""
        self._settle()
        self._current = False
        self._matcher.consume_token(token)
        return self._matcher.is_stopped()

    def _settle(self) -> None:
        """Wait for the job computing the next mask, if one is (its error, if any, is raised here)."""
        job, self._ahead = self._ahead, None
        if job is not None:
            job.result()


def allowed_rows(constraints: list[TokenConstraint], width: int) -> np.ndarray:
    """Bool masks [len(constraints), width] over `width` logits for the next token of each constraint (all of one
    tokenizer), unpacked together: True where the token keeps the text inside the grammar; tokens past the
    vocabulary never. A row that allows nothing (only after an error: a token forced past the mask) allows the
    end of sequence, so the sequence can end."""
    vocabs = {c.vocab for c in constraints}
    if len(vocabs) != 1:
        raise ValueError(f"masks of one tokenizer's vocabulary unpack together, not of {sorted(vocabs)}")
    known = min(width, vocabs.pop())
    packed = np.stack([c.bits() for c in constraints]).view(np.uint8)
    unpacked = np.unpackbits(packed, axis=1, count=known, bitorder="little").view(bool)
    if known == width:
        allowed = unpacked
    else:  # a padded head: its extra rows are never allowed
        allowed = np.zeros((len(constraints), width), bool)
        allowed[:, :known] = unpacked
    for r in np.flatnonzero(~allowed.any(axis=1)):
        allowed[r, [t for t in constraints[r].eos if t < width]] = True
    return allowed


class Grammars:
    """One tokenizer's grammar compiler: request text -> a checked matcher, cached; each sequence gets a copy."""

    def __init__(self, tokenizer: Tokenizer, eos_token_ids: frozenset[int]):
        self._eos = sorted(eos_token_ids)
        self._vocab = tokenizer.get_vocab_size()
        # Building llguidance's token trie walks the whole vocabulary: once per model, on first use.
        self._tokenizer_json = tokenizer.to_str()
        self._tokenizer: llguidance.LLTokenizer | None = None
        self._compiled: OrderedDict[str, llguidance.LLMatcher] = OrderedDict()
        self._lock = threading.Lock()  # the gateway checks and the engine compiles from different threads

    def compiled(self, request: str) -> bool:
        """Whether `request` is compiled already (checking it again costs nothing)."""
        with self._lock:
            return request in self._compiled

    def check(self, request: str) -> None:
        """Raises GrammarError naming what the engine cannot enforce; compiles and caches the grammar otherwise."""
        self._compile(request)

    def constraint(self, request: str) -> TokenConstraint:
        """A fresh matcher for one sequence (a copy of the cached compiled one)."""
        return TokenConstraint(self._compile(request).deep_copy(), self._vocab, self._eos)

    def _compile(self, request: str) -> llguidance.LLMatcher:
        with self._lock:
            if request in self._compiled:
                self._compiled.move_to_end(request)
                return self._compiled[request]
        grammar = _grammar_of(request)
        tokenizer = self._llg_tokenizer()
        failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, tokenizer)
        if failed:
            raise GrammarError(f"the schema cannot be enforced: {'; '.join(messages)}")
        matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise GrammarError(f"the schema cannot be enforced: {matcher.get_error()}")
        with self._lock:
            self._compiled[request] = matcher
            while len(self._compiled) > MAX_GRAMMARS:
                self._compiled.popitem(last=False)
        return matcher

    def _llg_tokenizer(self) -> llguidance.LLTokenizer:
        with self._lock:
            if self._tokenizer is None:
                eos = self._eos or None  # llguidance picks the tokenizer's own when none is named
                try:
                    self._tokenizer = llguidance.LLTokenizer(self._tokenizer_json, n_vocab=self._vocab, eos_token=eos)
                except Exception as e:  # a tokenizer llguidance cannot read: the model serves free text only
                    raise GrammarError(f"this model's tokenizer cannot be constrained ({e})") from None
            return self._tokenizer
