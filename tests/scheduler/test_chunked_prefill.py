"""Chunked prefill in the engine, stepped by hand: a long prompt arriving beside running streams is prefilled a
chunk per round while every running stream gains a token each round, and all of them equal their single-stream
answers; a prompt sharing full blocks with an earlier one computes only its remainder."""

import asyncio

import pytest

from luminal.llm_package import build_package, save_package
from luminal.scheduler.generation.engine import GenerationEngine
from luminal.scheduler.generation.language_model import compile_package, load_language_model
from luminal.scheduler.generation.sampling import SamplingParams
from tests.llm_folders import greedy_answer, hf_folder

CHUNK = 8  # prompt tokens a round: small, so the tiny model's prompts take several chunks


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chunked")
    hf = hf_folder(folder, "llama")
    save_package(build_package(folder, max_batch=4, positions=64), folder / "m.lpkg")
    compile_package(folder / "m.lpkg", "cpu", folder / "m.llmprog")
    return hf, load_language_model(folder / "m.llmprog")


def _greedy(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0, ignore_eos=True)


def test_a_long_prompt_is_prefilled_a_chunk_per_step_beside_running_streams(compiled):
    hf, model = compiled
    assert model.chunk is not None
    engine, loop = GenerationEngine(model, prefill_chunk=CHUNK), asyncio.new_event_loop()
    running = [engine.submit(model.codec.encode(t), _greedy(20), loop) for t in ("the quick", "hello world")]
    engine.run_once()
    assert engine.running == running
    long_prompt = model.codec.encode("the quick brown fox jumps over the lazy dog, hello world; language models")
    assert 4 * CHUNK < len(long_prompt) <= 64 - 6
    long = engine.submit(long_prompt, _greedy(6), loop)
    rounds = 0
    while long not in engine.running:
        before = [len(s.sequence.tokens) for s in running]
        chunks, positions = engine.chunked.chunks, engine.chunked.positions
        engine.run_once()
        rounds += 1
        assert engine.chunked.chunks == chunks + 1 and engine.chunked.positions - positions <= CHUNK
        assert [len(s.sequence.tokens) for s in running] == [n + 1 for n in before]  # nobody waited a round out
    assert rounds == -(-len(long_prompt) // CHUNK) and engine.chunked.positions == len(long_prompt) + sum(
        len(s.sequence.prompt) for s in running
    )
    while engine.busy:
        engine.run_once()
    for s in [*running, long]:
        assert s.sequence.tokens == greedy_answer(hf, s.sequence.prompt, s.sequence.params.max_tokens)
    assert engine.prefills == 0 and engine.batch.pool.in_use == 0
    loop.close()


def test_a_shared_prefix_is_not_prefilled_again(compiled):
    hf, model = compiled
    size = model.block_size
    engine, loop = GenerationEngine(model, prefill_chunk=CHUNK), asyncio.new_event_loop()
    prompt = model.codec.encode("the quick brown fox jumps over the lazy dog, hello world; language models answer")
    assert 2 * size < len(prompt) <= 64 - 8
    first = engine.submit(prompt, _greedy(8), loop)
    while first not in engine.running:
        engine.run_once()
    computed = engine.chunked.positions
    variant = prompt[: 2 * size] + model.codec.encode(" luminal compiler")
    second = engine.submit(variant, _greedy(8), loop)
    while second not in engine.running:
        engine.run_once()
    assert engine.batch.pool.shared[id(second)] == 2
    assert engine.chunked.positions - computed == len(variant) - 2 * size  # only the remainder
    while engine.busy:
        engine.run_once()
    for s in (first, second):
        assert s.sequence.tokens == greedy_answer(hf, s.sequence.prompt, 8)
    loop.close()


def test_a_cancelled_prefill_frees_its_blocks(compiled):
    _, model = compiled
    engine, loop = GenerationEngine(model, prefill_chunk=CHUNK), asyncio.new_event_loop()
    ended = []
    engine.on_end = ended.append
    stream = engine.submit(model.codec.encode("hello world, hello luminal; a compiler of few ops"), _greedy(4), loop)
    engine.run_once()
    assert engine.prefilling == [stream] and engine.batch.pool.in_use > 0
    stream.cancel()
    engine.run_once()
    assert not engine.busy and engine.batch.pool.in_use == 0 and ended == [stream]
    loop.close()


def test_newcomers_prefill_together_in_one_run_per_share_length(compiled):
    """Prompts arriving together run as rows of one chunk-program run: equal prompts in one run, prompts of three
    lengths in three (each run takes every unfinished row's next chunk of the shortest share), and every answer
    equals its single-stream one."""
    hf, model = compiled
    engine, loop = GenerationEngine(model, prefill_chunk=64), asyncio.new_event_loop()
    same = model.codec.encode("the quick brown fox")
    streams = [engine.submit(same, _greedy(5), loop) for _ in range(3)]
    engine.run_once()
    assert engine.chunked.chunks == 1 and engine.chunked.positions == 3 * len(same)
    assert engine.running == streams
    texts = ["hello", "hello world, hello luminal", "a compiler of few ops, and language models"]
    prompts = [model.codec.encode(t) for t in texts]
    assert len({len(p) for p in prompts}) == 3 and sum(map(len, prompts)) <= 64
    while engine.busy:
        engine.run_once()
    late = [engine.submit(p, _greedy(6), loop) for p in prompts]
    engine.run_once()
    assert engine.chunked.chunks == 1 + 3 and engine.chunked.positions == 3 * len(same) + sum(map(len, prompts))
    assert engine.running == late  # arrival order, though the shortest finished first
    while engine.busy:
        engine.run_once()
    for s in [*streams, *late]:
        assert s.sequence.tokens == greedy_answer(hf, s.sequence.prompt, s.sequence.params.max_tokens)
    assert engine.batch.pool.in_use == 0
    loop.close()


def test_a_budget_split_mid_prompt_runs_the_rest_next_round(compiled):
    """A round's budget that ends inside the second prompt: both run together for the shorter share, the second's
    rest waits for the next round, and the answers are still the single-stream ones."""
    hf, model = compiled
    engine, loop = GenerationEngine(model, prefill_chunk=CHUNK), asyncio.new_event_loop()
    first, second = (model.codec.encode(t) for t in ("the quick", "hello world, hello luminal; a compiler"))
    assert len(first) < CHUNK < len(first) + len(second)
    streams = [engine.submit(p, _greedy(4), loop) for p in (first, second)]
    engine.run_once()
    assert engine.chunked.positions == CHUNK and engine.running == streams[:1]
    while engine.busy:
        engine.run_once()
    for s in streams:
        assert s.sequence.tokens == greedy_answer(hf, s.sequence.prompt, 4)
    loop.close()
