"""Which grammar engine enforces `response_format` (issue 45): the time to compute one token mask, per token, of
llguidance, xgrammar and outlines-core on this machine, with the tokenizer of the tiny test models (a byte-level
BPE trained by tests/llm_folders.py) and a realistic schema (nested object, enum, array, number, boolean, string
pattern). Each engine walks the same valid answer token by token: compute the mask for the next token, check the
answer's token is allowed, accept it. Printed: median and 90th-percentile mask time per token, the grammar's
compile time, CPU model and load. An engine that is not installed is skipped (only llguidance is a dependency).
The row "luminal" is what a constrained sequence pays per token here: its sampler's whole shaping (the mask
unpacked, forbidden logits set to -inf, the greedy choice) and the matcher's advance, in CPU time of the thread.
`--vocab N` (N > 320) trains a byte-level BPE of N tokens on the standard library's sources instead, for a
vocabulary nearer a real model's.

`python bench/grammar_masks.py [--repeats N] [--vocab N]`
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from machine import cpu_model  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

from luminal.scheduler.generation.grammar import JSON_SCHEMA, grammar_request  # noqa: E402
from luminal.scheduler.generation.sampling import SamplingParams  # noqa: E402
from luminal.scheduler.generation.sequence import Sequence  # noqa: E402
from luminal.scheduler.generation.tokenizer import TextCodec  # noqa: E402
from tests.llm_folders import BOS, EOS, train_tokenizer  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.[a-z]{2,3}$"},
        "role": {"enum": ["admin", "user", "guest"]},
        "score": {"type": "number"},
        "active": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "email", "role", "score", "active", "tags", "address"],
    "additionalProperties": False,
}
ANSWER = {
    "name": "the quick brown fox",
    "age": 42,
    "email": "hello@luminal.ai",
    "role": "user",
    "score": 3.25,
    "active": True,
    "tags": ["language", "models", "compiler"],
    "address": {"city": "Paris is the capital", "zip": "75001"},
}


def stdlib_tokenizer(vocab: int) -> Tokenizer:
    """Byte-level BPE of `vocab` tokens over the standard library's sources (text that is on every machine)."""
    sources = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:400]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[BOS, EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tokenizer.train_from_iterator((p.read_text(errors="replace") for p in sources), trainer)
    return tokenizer


def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet back to bytes: printable bytes stand for themselves, the rest were shifted
    to 256 + n in order (what the ByteLevel pre-tokenizer does)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, shifted = {b: b for b in printable}, 0
    for b in range(256):
        if b not in chars:
            chars[b], shifted = 256 + shifted, shifted + 1
    return {chr(c): b for b, c in chars.items()}


def walk(mask: Callable[[], np.ndarray], accept: Callable[[int], None], tokens: list[int]) -> list[float]:
    """Seconds per mask along `tokens`, each token checked against its mask then accepted."""
    times = []
    for token in tokens:
        start = time.perf_counter()
        allowed = mask()
        times.append(time.perf_counter() - start)
        assert allowed[token], f"token {token} refused by the grammar"
        accept(token)
    return times


def llguidance_walk(tokenizer, tokens: list[int], vocab: int, eos: int) -> tuple[float, Callable[[], list[float]]]:
    import llguidance
    import llguidance.numpy

    ll_tokenizer = llguidance.LLTokenizer(tokenizer.to_str(), n_vocab=vocab, eos_token=eos)
    start = time.perf_counter()
    grammar = llguidance.LLMatcher.grammar_from_json_schema(SCHEMA)
    llguidance.LLMatcher(ll_tokenizer, grammar)
    compile_s = time.perf_counter() - start

    def run() -> list[float]:
        matcher = llguidance.LLMatcher(ll_tokenizer, grammar)
        bits = llguidance.numpy.allocate_token_bitmask(1, vocab)

        def mask() -> np.ndarray:
            llguidance.numpy.fill_next_token_bitmask(matcher, bits, 0)
            return np.unpackbits(bits[0].view(np.uint8), bitorder="little")[:vocab].astype(bool)

        return walk(mask, matcher.consume_token, tokens)

    return compile_s, run


def xgrammar_walk(tokenizer, tokens: list[int], vocab: int, eos: int) -> tuple[float, Callable[[], list[float]]]:
    import transformers
    import xgrammar

    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS)
    info = xgrammar.TokenizerInfo.from_huggingface(hf, vocab_size=vocab, stop_token_ids=[eos])
    start = time.perf_counter()
    compiled = xgrammar.GrammarCompiler(info, cache_enabled=False).compile_json_schema(json.dumps(SCHEMA))
    compile_s = time.perf_counter() - start

    def run() -> list[float]:
        matcher = xgrammar.GrammarMatcher(compiled)
        bits = xgrammar.allocate_token_bitmask(1, vocab)

        def mask() -> np.ndarray:
            matcher.fill_next_token_bitmask(bits)
            return np.unpackbits(bits[0].numpy().view(np.uint8), bitorder="little")[:vocab].astype(bool)

        return walk(mask, matcher.accept_token, tokens)

    return compile_s, run


def outlines_walk(tokenizer, tokens: list[int], vocab: int, eos: int) -> tuple[float, Callable[[], list[float]]]:
    from outlines_core import Guide, Index, Vocabulary
    from outlines_core.json_schema import build_regex_from_schema

    to_byte = byte_decoder()
    words: dict[bytes, list[int]] = {}
    for text, token in tokenizer.get_vocab().items():
        if token not in (eos, tokenizer.token_to_id(BOS)):  # the special tokens are no text
            words.setdefault(bytes(to_byte[c] for c in text), []).append(token)
    start = time.perf_counter()
    index = Index(build_regex_from_schema(json.dumps(SCHEMA)), Vocabulary(eos, words))
    compile_s = time.perf_counter() - start

    def run() -> list[float]:
        guide = Guide(index)

        def mask() -> np.ndarray:
            allowed = np.zeros(vocab, bool)
            allowed[guide.get_tokens()] = True
            return allowed

        return walk(mask, guide.advance, tokens)

    return compile_s, run


def luminal_walk(tokenizer, tokens: list[int], vocab: int, eos: int) -> tuple[float, Callable[[], list[float]]]:
    """A Sequence's own path: the logits are a one-hot row on the answer's token, so the greedy choice follows it."""
    codec = TextCodec(tokenizer, {}, None, frozenset({eos}))
    request = grammar_request(JSON_SCHEMA, SCHEMA)
    start = time.perf_counter()
    codec.grammars.check(request)
    compile_s = time.perf_counter() - start

    def run() -> list[float]:
        params = SamplingParams(len(tokens) + 1, 0.0, response_format=request)
        seq = Sequence([0], params, codec.decode, codec.eos_token_ids, grammars=codec.grammars)
        times = []
        for token in tokens:
            logits = np.zeros(vocab, np.float32)
            logits[token] = 1.0
            start = time.thread_time()
            chosen = seq.sampler.choose(logits)
            seq.constraint.advance(chosen)
            times.append(time.thread_time() - start)
            assert chosen == token, f"token {token} refused by the grammar"
        return times

    return compile_s, run


ENGINES = {
    "llguidance": llguidance_walk,
    "xgrammar": xgrammar_walk,
    "outlines-core": outlines_walk,
    "luminal": luminal_walk,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--vocab", type=int, default=320)
    args = parser.parse_args()
    tokenizer = train_tokenizer() if args.vocab <= 320 else stdlib_tokenizer(args.vocab)
    vocab, eos = tokenizer.get_vocab_size(), tokenizer.token_to_id(EOS)
    # The answer as a model writes it token by token: the tokenizer's own split of the compact JSON text.
    tokens = tokenizer.encode(json.dumps(ANSWER, separators=(",", ":"))).ids
    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores); load average {os.getloadavg()}")
    print(f"vocabulary {vocab} tokens; answer {len(tokens)} tokens; {args.repeats} walks per engine")
    print(f"{'engine':<14}{'compile ms':>12}{'median us/token':>18}{'p90 us/token':>15}")
    for name, prepare in ENGINES.items():
        try:
            compile_s, run = prepare(tokenizer, tokens, vocab, eos)
        except ImportError as e:
            print(f"{name:<14} not installed ({e.name})")
            continue
        per_token = [t for _ in range(args.repeats) for t in run()]
        median, p90 = statistics.median(per_token) * 1e6, float(np.percentile(per_token, 90)) * 1e6
        print(f"{name:<14}{compile_s * 1e3:>12.2f}{median:>18.1f}{p90:>15.1f}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
