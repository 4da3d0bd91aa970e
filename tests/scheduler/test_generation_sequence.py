"""A sequence's text as OpenAI documents it: stop strings are cut and held back, end-of-sequence and stop tokens
end it without text, seeded sampling repeats."""

import numpy as np

from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.sequence import Sequence


def _decode(ids):  # one character per token: 100 -> "a", 101 -> "b", ...
    return "".join(chr(ord("a") + i - 100) for i in ids if i >= 100)


def _run(tokens, **params) -> tuple[list[str], str | None, str]:
    seq = Sequence([1], SamplingParams(**params), _decode, eos_token_ids=frozenset({2}))
    pieces = []
    for t in tokens:
        pieces.append(seq.add(t))
        if seq.finished:
            break
    return pieces, seq.finish_reason, seq.text


def test_stop_strings_are_cut_and_held_back():
    pieces, reason, text = _run([100, 101, 102, 103, 104], max_tokens=9, stop=("cd",))  # a b c d e
    assert (text, reason) == ("ab", "stop")
    assert pieces == ["a", "b", "", ""]  # "c" was held back: it might start "cd"
    pieces, reason, text = _run([100, 102, 101, 103], max_tokens=4, stop=("cd",))
    assert (text, reason, "".join(pieces)) == ("acbd", "length", "acbd")


def test_eos_and_stop_tokens_end_the_sequence_without_text():
    assert _run([100, 2, 101], max_tokens=9)[1:] == ("stop", "a")
    assert _run([100, 2, 101], max_tokens=3, ignore_eos=True)[1:] == ("length", "ab")
    assert _run([100, 105, 101], max_tokens=9, stop_token_ids=(105,))[1:] == ("stop", "a")


def test_seeded_sampling_repeats():
    logits = np.random.default_rng(0).standard_normal(50)

    def draws(seed):
        sampler = Sequence([1], SamplingParams(8, temperature=1.0, top_k=20, top_p=0.9, seed=seed), _decode).sampler
        return [sampler.choose(logits) for _ in range(12)]

    assert draws(7) == draws(7) != draws(8)
    assert len(set(draws(7))) > 1  # really sampled, not the argmax every time
