"""The engine on a CUDA worker, through the fake device: the KV pools are device arrays that the paged step and
the prefill chunk write in place (the same arrays every step, never copied to the host), tokens are chosen by the
device sampler, and only token ids, positions, block tables and sampling parameters cross per step. Greedy
completions equal transformers'; a seeded sampled sequence repeats whatever shares its batch. A chooser that fails
fails its sequences, not the engine."""

import asyncio

import numpy as np
import pytest

from luminal.scheduler.generation.choosers import DeviceChooser
from luminal.scheduler.generation.engine import GenerationEngine
from luminal.scheduler.generation.memory_space import DeviceMemory
from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.stream import GenerationFailed
from tests.llm_folders import greedy_answer
from tests.runtime.cuda import fake_cupy
from tests.runtime.cuda.conftest import fake_cublas_library  # noqa: F401 - a fixture the tests use
from tests.scheduler.device_model import cpu_llama, fake_device_model

pytestmark = [pytest.mark.needs("g++"), pytest.mark.usefixtures("fake_cublas_library")]
PROMPTS = ("the quick brown fox", "hello world", "language models answer questions")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    hf, package, cpu = cpu_llama(tmp_path_factory.mktemp("device-engine"))
    return hf, cpu, fake_device_model(cpu, package), fake_device_model(cpu, package, chunked=False)


def _run(engine: GenerationEngine) -> None:
    while engine.busy:
        engine.run_once()


def _greedy(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0, ignore_eos=True)


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked prefill", "one-go prefill"])
def test_greedy_streams_on_device_pools_equal_transformers(models, monkeypatch, chunked):
    hf, _, chunked_model, one_go_model = models
    model = chunked_model if chunked else one_go_model
    engine, loop = GenerationEngine(model, prefill_chunk=8), asyncio.new_event_loop()
    assert isinstance(engine.memory, DeviceMemory) and isinstance(engine.chooser, DeviceChooser)
    pools = dict(engine.batch.pools)
    assert all(isinstance(p, fake_cupy.ndarray) for p in pools.values())
    fetched = []  # every device -> host copy: (shape, dtype)
    real_get = fake_cupy.ndarray.get
    monkeypatch.setattr(
        fake_cupy.ndarray, "get", lambda self, stream=None: fetched.append(self.shape) or real_get(self, stream)
    )
    streams = [engine.submit(model.codec.encode(p), _greedy(8), loop) for p in PROMPTS]
    _run(engine)
    for s in streams:
        assert s.sequence.tokens == greedy_answer(hf, s.sequence.prompt, 8)
    assert engine.batch.pools == pools  # the same device arrays, written in place every step
    assert all(engine.batch.pools[n] is p for n, p in pools.items())
    vocab, pool_shape = hf.config.vocab_size, next(iter(pools.values())).shape
    assert not [shape for shape in fetched if shape == pool_shape or (shape and shape[-1] == vocab)]
    assert engine.chooser.sampler.bytes_out == 8 * sum(len(s.sequence.tokens) for s in streams)  # token ids only
    loop.close()


def test_per_step_host_traffic_is_ids_positions_tables_and_parameters(models):
    _, _, model, _ = models
    engine, loop = GenerationEngine(model, prefill_chunk=64), asyncio.new_event_loop()
    streams = [engine.submit(model.codec.encode(p), _greedy(6), loop) for p in PROMPTS]
    engine.run_once()  # every prompt prefilled in one chunk run, every first token chosen, one step
    assert len(engine.running) == 3
    before = engine.memory.bytes_in + engine.chooser.sampler.bytes_in
    engine.run_once()  # one decode step of three rows
    per_step = engine.memory.bytes_in + engine.chooser.sampler.bytes_in - before
    pool_bytes = sum(p.nbytes for p in engine.batch.pools.values())
    # input_ids, position_ids, slots: 3 x 8 bytes each; a block table of 3 x width int64; per row 48 bytes of
    # sampling parameters, and the sampler's dims
    width = engine.batch.step_feed(np.zeros(3, np.int64))["block_table"].shape[1]
    assert per_step == 3 * 8 * 3 + 3 * width * 8 + 3 * 48 + 5 * 8 < pool_bytes / 100
    _run(engine)
    assert all(len(s.sequence.tokens) == 6 for s in streams)
    loop.close()


async def _deltas(stream) -> list:
    return [delta async for delta in stream]


def test_a_seeded_sequence_repeats_whatever_shares_its_batch(models):
    _, _, model, _ = models
    seeded = SamplingParams(max_tokens=6, temperature=0.9, top_k=40, top_p=0.95, seed=1234, ignore_eos=True,
                            logprobs=2)  # fmt: skip
    prompt = model.codec.encode("hello world")

    def run_beside(others: list[str]) -> tuple[list[int], list]:
        engine, loop = GenerationEngine(model, prefill_chunk=64), asyncio.new_event_loop()
        for text in others:
            engine.submit(model.codec.encode(text), SamplingParams(max_tokens=6, temperature=1.0), loop)
        stream = engine.submit(prompt, seeded, loop)
        _run(engine)
        deltas = loop.run_until_complete(_deltas(stream))
        loop.close()
        return stream.sequence.tokens, deltas

    alone, deltas = run_beside([])
    assert run_beside(["the quick brown fox", "language models"])[0] == alone
    assert [d.token for d in deltas] == alone
    for d in deltas:  # the device's log-probabilities: the chosen token's and the two most likely, in order
        assert d.logprob.token == d.token and len(d.logprob.top) == 2
        (first, p1), (_, p2) = d.logprob.top
        assert 0 >= p1 >= p2 and d.logprob.logprob <= p1 and (d.token != first or d.logprob.logprob == p1)


class _Broken:
    """A chooser that fails, as a device sampler meeting a fault would."""

    def choose(self, sequences, logits, rows=None):
        raise RuntimeError("the sampler faulted")


@pytest.mark.parametrize("at", ["first token", "decode step"])
def test_a_failed_choice_fails_its_sequences_and_the_engine_goes_on(models, at):
    _, cpu, _, _ = models
    engine, loop = GenerationEngine(cpu, prefill_chunk=64), asyncio.new_event_loop()
    working = engine.chooser
    if at == "first token":
        engine.chooser = _Broken()
    broken = engine.submit(cpu.codec.encode("hello world"), _greedy(4), loop)
    engine.run_once()
    engine.chooser = _Broken()
    engine.run_once()
    assert not engine.running and not engine.prefilling and engine.batch.pool.in_use == 0
    with pytest.raises(GenerationFailed, match="failed: RuntimeError: the sampler faulted"):
        loop.run_until_complete(_deltas(broken))
    engine.chooser = working
    after = engine.submit(cpu.codec.encode("hello world"), _greedy(4), loop)
    _run(engine)
    assert len(after.sequence.tokens) == 4
    loop.close()
