"""The generation engine, stepped by hand: sequences of different lengths batched together each produce what
transformers' generate() produces alone, with the paged step and with the concatenating one of older files; a
cancelled sequence leaves the batch and frees its cache blocks; a full batch admits by urgency.
(A sequence's own text: test_generation_sequence.py.)"""

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from luminal.compiler.artifact import program_to_bytes
from luminal.compiler.cpu import prepack
from luminal.compiler.kernels import ir
from luminal.compiler.storage.artifact_json import ArtifactError
from luminal.dtypes import dtype_of
from luminal.graph import Graph
from luminal.graph_file import WEIGHTS, _safetensors_parts, read_safetensors
from luminal.llm_package import CONFIG, TOKENIZER, build_package, load_package, save_package
from luminal.scheduler.generation.engine import EngineBusy, GenerationEngine, PromptTooLong
from luminal.scheduler.generation.language_model import (
    FORMAT,
    FORMAT_V1,
    FORMAT_V4,
    V1_PREFILL,
    V1_STEP,
    compile_package,
    load_language_model,
)
from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.stream import WaitExpired
from luminal.zip_bundle import read_bundle, write_bundle
from tests.llm_folders import greedy_answer, hf_folder


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def compiled_file(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    hf = hf_folder(folder, request.param)
    save_package(build_package(folder, max_batch=4, positions=64), folder / "m.lpkg")
    compile_package(folder / "m.lpkg", "cpu", folder / "m.llmprog")
    return hf, folder


@pytest.fixture(scope="module")
def contiguous(compiled_file):
    """The same model compiled from a package built before paged steps (format 2: the step concatenates)."""
    return _recompiled_without(compiled_file, "old", paged=None, block_size=None, chunk=None)


@pytest.fixture(scope="module")
def unchunked(compiled_file):
    """The same model compiled from a package built before chunk graphs (format 3: prompts prefilled at once)."""
    return _recompiled_without(compiled_file, "unchunked", chunk=None)


def _recompiled_without(compiled_file, name: str, **dropped):
    """The test model's package with some parts set as `dropped` says, compiled again and loaded."""
    hf, folder = compiled_file
    package = load_package(folder / "m.lpkg")
    for part, value in dropped.items():
        setattr(package, part, value)
    save_package(package, folder / f"{name}.lpkg")
    compile_package(folder / f"{name}.lpkg", "cpu", folder / f"{name}.llmprog")
    return hf, load_language_model(folder / f"{name}.llmprog")


@pytest.fixture(scope="module")
def compiled(compiled_file):
    hf, folder = compiled_file
    return hf, load_language_model(Path(folder / "m.llmprog"))


def test_batched_sequences_equal_their_single_answers(compiled):
    _batched_sequences_equal_their_single_answers(*compiled, paged=True)


def test_batched_sequences_equal_their_single_answers_without_a_chunk_program(unchunked):
    assert unchunked[1].chunk is None
    _batched_sequences_equal_their_single_answers(*unchunked, paged=True)


def test_batched_sequences_equal_their_single_answers_on_an_older_file(contiguous):
    _batched_sequences_equal_their_single_answers(*contiguous, paged=False)


def _batched_sequences_equal_their_single_answers(hf, model, paged: bool):
    assert (model.block_size is not None) == paged
    engine, loop = GenerationEngine(model), asyncio.new_event_loop()
    texts = ["the quick brown", "hello world, hello luminal; a compiler of", "user: what", "a", "language models"]
    streams = []
    for k, text in enumerate(texts):  # 5 sequences, 4 rows: one waits; two join after the first step
        prompt = model.codec.encode(text)
        streams.append(
            engine.submit(prompt, SamplingParams(max_tokens=4 + 3 * k, temperature=0, ignore_eos=True), loop)
        )
        if k == 2:
            engine.run_once()
            assert engine.batch.rows == 3
            if model.chunk is None:
                assert engine.prefills == 1  # three prompt lengths, one padded prefill
            else:
                assert engine.chunked.chunks == 3 and engine.prefills == 0  # each prompt one chunk
    held = []
    while engine.busy:
        engine.run_once()
        assert engine.batch.rows == len(engine.running) <= model.max_batch
        held.append(engine.batch.positions)
    for s in streams:
        assert s.sequence.tokens == greedy_answer(hf, s.sequence.prompt, s.sequence.params.max_tokens)
        assert s.sequence.finish_reason == "length"
    assert held[-1] == 0 and max(held) <= 4 * 64
    if paged:
        assert engine.batch.pool.in_use == 0 and not engine.batch.pool.tables
    loop.close()


def test_cancelled_sequence_frees_its_rows(compiled):
    _, model = compiled
    engine, loop = GenerationEngine(model), asyncio.new_event_loop()
    long = engine.submit(model.codec.encode("hello world, hello luminal"), SamplingParams(30, temperature=0), loop)
    short = engine.submit(model.codec.encode("a"), SamplingParams(30, temperature=0, ignore_eos=True), loop)
    engine.run_once()
    assert engine.batch.rows == 2
    blocks = engine.batch.pool.in_use
    long.cancel()
    engine.run_once()
    assert engine.batch.rows == 1 and engine.running == [short]
    assert engine.batch.positions == len(short.sequence.prompt) + len(short.sequence.tokens) - 1
    size = model.block_size
    assert engine.batch.pool.in_use == blocks - -(-(len(long.sequence.prompt) + 30) // size)  # freed at once
    loop.close()


def test_a_full_pool_makes_newcomers_wait_then_run_when_a_sequence_ends(compiled):
    hf, model = compiled
    size = model.block_size
    engine, loop = GenerationEngine(model, cache_blocks=4), asyncio.new_event_loop()
    params = SamplingParams(max_tokens=2 * size, temperature=0, ignore_eos=True)
    prompt = model.codec.encode("the quick brown")  # with 2 blocks of tokens: 3 blocks of the 4
    first, second = engine.submit(prompt, params, loop), engine.submit(prompt, params, loop)
    third = engine.submit(model.codec.encode("a"), SamplingParams(4, temperature=0, ignore_eos=True), loop)
    engine.run_once()
    # The second waits for blocks, and the third behind it (first come, first served), though one block is free.
    assert engine.running == [first] and list(engine.waiting) == [second, third]
    assert engine.batch.pool.in_use == 3
    while first in engine.running:
        engine.run_once()
        assert engine.waiting.first() is second  # still waiting, never failed
    while engine.busy:
        engine.run_once()
    for s in (first, second, third):
        assert s.sequence.tokens == greedy_answer(hf, s.sequence.prompt, s.sequence.params.max_tokens)
    assert engine.batch.pool.in_use == 0
    small = GenerationEngine(model, cache_blocks=2)  # could never hold this one: refused, not left waiting
    with pytest.raises(PromptTooLong, match="needs 3 cache blocks of 16; the pool holds 2"):
        small.submit(prompt, params, loop)
    loop.close()


def test_a_common_prompt_prefix_shares_its_full_blocks(compiled):
    _a_common_prompt_prefix_shares_its_full_blocks(*compiled)


def test_a_common_prompt_prefix_shares_its_full_blocks_without_a_chunk_program(unchunked):
    _a_common_prompt_prefix_shares_its_full_blocks(*unchunked)


def _a_common_prompt_prefix_shares_its_full_blocks(hf, model):
    size = model.block_size
    engine, loop = GenerationEngine(model), asyncio.new_event_loop()
    text = "the quick brown fox jumps over the lazy dog, hello world; language models answer questions"
    prompt = model.codec.encode(text)
    assert 2 * size < len(prompt) <= 64 - 8  # two full blocks, room for 8 tokens
    params = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
    first = engine.submit(prompt, params, loop)
    engine.run_once()  # the first's prompt blocks are written and published
    blocks = engine.batch.pool.in_use
    variant = prompt[: 2 * size] + model.codec.encode(" luminal")  # same first two blocks, then other tokens
    second = engine.submit(variant, params, loop)
    engine.run_once()
    assert engine.batch.pool.shared[id(second)] == 2
    assert engine.batch.pool.in_use - blocks == -(-(len(variant) + 8) // size) - 2  # only its own blocks are new
    while engine.busy:
        engine.run_once()
    for s in (first, second):
        assert s.sequence.tokens == greedy_answer(hf, s.sequence.prompt, 8)
    pool = engine.batch.pool
    assert pool.in_use == 0 and len(pool.index) == len(pool.cached) > 0  # nobody holds them: cached
    assert pool.reused_tokens == 2 * size  # the second's two shared blocks were not prefilled again
    loop.close()


def test_the_compiled_step_writes_the_pools_in_place(compiled):
    _, model = compiled
    kernels = model.step.program.kernels
    pools = {buf for name, buf in kernels.inputs.items() if name.startswith("pool.")}
    scatters = [k for k in kernels.kernels if isinstance(k, ir.ScatterKernel)]
    assert len(pools) == 2 * model.layers and {k.out for k in scatters} == pools  # each writes its pool input
    names = [name for name in kernels.inputs if name.startswith("pool.")]
    assert all(kernels.outputs[name][0] == kernels.inputs[name] for name in names)  # handed back, not copied
    engine, loop = GenerationEngine(model), asyncio.new_event_loop()
    before = dict(engine.batch.pools)
    engine.submit(model.codec.encode("hello world"), SamplingParams(5, temperature=0, ignore_eos=True), loop)
    while engine.busy:
        engine.run_once()
    assert engine.steps == 4 and all(engine.batch.pools[n] is a for n, a in before.items())  # never replaced
    loop.close()


def test_prompt_beyond_the_context_is_refused(compiled):
    _, model = compiled
    with pytest.raises(PromptTooLong, match="maximum context length is 64"):
        GenerationEngine(model).submit([5] * 60, SamplingParams(max_tokens=5), asyncio.new_event_loop())


def test_a_full_waiting_queue_refuses_with_engine_busy(compiled):
    _, model = compiled
    engine, loop = GenerationEngine(model, max_waiting=2), asyncio.new_event_loop()
    for _ in range(2):
        engine.submit([5, 6], SamplingParams(max_tokens=2), loop)
    with pytest.raises(EngineBusy, match="2 sequences are already waiting"):
        engine.submit([5, 6], SamplingParams(max_tokens=2), loop)
    engine.run_once()  # both join the batch: there is room to wait again
    engine.submit([5, 6], SamplingParams(max_tokens=2), loop)
    loop.close()


def test_compiled_file_holds_the_weights_once_and_old_files_still_load(compiled_file, compiled, contiguous):
    _, folder = compiled_file
    package_weights = load_package(folder / "m.lpkg").graphs.prefill.weight_data
    one_copy = sum(a.nbytes for a in package_weights.values())
    manifest, _ = read_bundle(FORMAT_V4, folder / "m.llmprog")
    assert one_copy <= manifest["entries"][WEIGHTS]["size"] <= one_copy + 8192  # plus the safetensors header
    for _, model in (compiled, contiguous):
        prefill, step = model.prefill.program.graph.weight_data, model.step.program.graph.weight_data
        assert set(prefill) == set(step) and all(prefill[n] is step[n] for n in prefill)  # one copy in memory too
    # A format-1 file (each program with its own weights) of the same programs loads and computes the same.
    model = load_language_model(folder / "old.llmprog", keep_weights=True)  # every weight, to save them
    manifest, raw = read_bundle(FORMAT, folder / "old.llmprog")
    text = {n: [bytes(raw[n])] for n in (CONFIG, TOKENIZER) + tuple(n for n in raw if n.endswith("config.json"))}
    entries = {V1_PREFILL: [program_to_bytes(model.prefill.program)], V1_STEP: [program_to_bytes(model.step.program)]}
    fields = {k: manifest[k] for k in ("layers", "max_batch", "max_positions", "target")}
    write_bundle(FORMAT_V1, folder / "v1.llmprog", {**entries, **text}, fields)
    old = load_language_model(folder / "v1.llmprog")
    assert (folder / "v1.llmprog").stat().st_size - (folder / "old.llmprog").stat().st_size > 0.9 * one_copy
    ids = np.array([[3, 4, 5, 6]], np.int64)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(4)[None]}
    new_out, old_out = model.prefill.run(feed), old.prefill.run(feed)
    assert all(np.array_equal(new_out[k], old_out[k]) for k in new_out)
    step_feed = {k.replace("present", "past"): v for k, v in new_out.items() if k != "logits"}
    step_feed |= {"input_ids": ids[:, :1], "attention_mask": np.ones((1, 5), np.int64), "position_ids": [[4]]}
    step_feed["position_ids"] = np.array(step_feed["position_ids"], np.int64)
    assert np.array_equal(model.step.run(step_feed)["logits"], old.step.run(step_feed)["logits"])


def test_a_tampered_weights_entry_is_refused(compiled_file, tmp_path):
    _, folder = compiled_file
    manifest, raw = read_bundle(FORMAT_V4, folder / "m.llmprog")
    arrays = read_safetensors(raw[WEIGHTS])
    holder = Graph()
    extra = {**arrays, "stray": np.zeros(3, np.float32)}
    for name, arr in extra.items():
        holder.weight(name, arr.shape, dtype_of(arr.dtype))
    holder.bind(extra)
    entries = {n: [bytes(v)] for n, v in raw.items()}
    entries[WEIGHTS] = _safetensors_parts(holder)
    fields = {k: v for k, v in manifest.items() if k not in ("format", "format_version", "entries")}
    write_bundle(FORMAT_V4, tmp_path / "bad.llmprog", entries, fields)
    with pytest.raises(ArtifactError, match="no program binds"):
        load_language_model(tmp_path / "bad.llmprog")


def test_a_damaged_older_file_is_refused_naming_its_defect(compiled_file, unchunked, tmp_path):
    _, folder = compiled_file
    data = (folder / "unchunked.llmprog").read_bytes()  # format 3
    assert b'"F32"' in data  # the weights entry is stored, not compressed: its header's dtypes are readable
    (tmp_path / "damaged.llmprog").write_bytes(data.replace(b'"F32"', b'"F31"', 1))
    with pytest.raises(ArtifactError, match="weights.safetensors is corrupt"):  # not "unsupported format version"
        load_language_model(tmp_path / "damaged.llmprog")


def test_sampled_tokens_carry_the_logprobs_of_the_unmodified_distribution(compiled):
    hf, model = compiled
    engine, loop = GenerationEngine(model), asyncio.new_event_loop()
    prompt = model.codec.encode("the quick brown")
    params = SamplingParams(max_tokens=6, temperature=0.7, top_k=5, seed=11, ignore_eos=True, logprobs=2)
    stream = engine.submit(prompt, params, loop)
    while engine.busy:
        engine.run_once()

    async def deltas():
        return [d async for d in stream]

    got = [d.logprob for d in loop.run_until_complete(deltas())]
    tokens = stream.sequence.tokens
    with torch.no_grad():
        logits = hf(torch.tensor([prompt + tokens])).logits[0].double()
    reference = torch.log_softmax(logits, -1)[len(prompt) - 1 : -1]
    assert [g.token for g in got] == tokens
    for row, g in zip(reference, got, strict=True):
        assert abs(g.logprob - row[g.token].item()) < 1e-4
        assert [t for t, _ in g.top] == torch.topk(row, 2).indices.tolist()
    loop.close()


class SteppedClock:
    """The waiting line's clock, stepped by the test."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _rounds_until_joined(engine, streams) -> dict:
    """Run rounds to the end; for each of `streams`, the round it joined the batch."""
    joined, round_ = {}, 0
    while engine.busy:
        engine.run_once()
        round_ += 1
        for name, stream in streams.items():
            if name not in joined and stream.started_at is not None:
                joined[name] = round_
    return joined


def test_a_full_batch_admits_the_most_urgent_waiting_sequence_first(compiled):
    _, model = compiled
    engine, loop = GenerationEngine(model), asyncio.new_event_loop()
    # Fillers take every row and end one round apart, and the waiting ones run longer, so each freed row goes to
    # exactly one waiting sequence.
    for k in range(model.max_batch):
        engine.submit([5, 6], SamplingParams(max_tokens=3 + k, temperature=0, ignore_eos=True), loop)
    engine.run_once()
    assert len(engine.running) == model.max_batch
    params = SamplingParams(max_tokens=20, temperature=0, ignore_eos=True)
    waiting = {}
    for name, priority in [("low", 10), ("default", 0), ("urgent", 1), ("default_later", 5)]:
        waiting[name] = engine.submit([7, 8, 9], params, loop, priority=priority)
    assert list(engine.waiting) == [waiting[n] for n in ("urgent", "default", "default_later", "low")]
    joined = _rounds_until_joined(engine, waiting)
    assert joined["urgent"] < joined["default"] < joined["default_later"] < joined["low"]
    loop.close()


def test_an_expired_waiting_sequence_gets_its_error_and_never_runs(compiled):
    _, model = compiled
    clock, ended = SteppedClock(), []
    engine, loop = GenerationEngine(model, on_end=ended.append, clock=clock), asyncio.new_event_loop()
    filler = SamplingParams(8, temperature=0, ignore_eos=True)
    fillers = [engine.submit([5, 6], filler, loop) for _ in range(model.max_batch)]
    engine.run_once()
    assert engine.running == fillers  # the batch is full
    late = engine.submit([7, 8], SamplingParams(4, temperature=0), loop, priority=1, timeout_s=5)
    patient = engine.submit([7, 8], SamplingParams(4, temperature=0), loop, timeout_s=60)
    engine.run_once()
    assert list(engine.waiting) == [late, patient]
    clock.now = 4.99
    engine.run_once()
    assert len(engine.waiting) == 2  # not yet
    clock.now = 5.0
    prefills = engine.prompt_runs
    engine.run_once()
    assert list(engine.waiting) == [patient] and len(engine.waiting) == 1  # the waiting gauge drops at once
    while engine.busy:
        engine.run_once()
    with pytest.raises(WaitExpired, match=r"timeout passed before generation started \(it waited 5.000 s\)"):
        loop.run_until_complete(_read_all(late))
    assert late.started_at is None and late.sequence.tokens == [] and late.compute_s == 0
    assert late not in ended and patient in ended  # never run, never billed
    assert engine.prompt_runs > prefills and patient.sequence.finish_reason is not None
    loop.close()


async def _read_all(stream):
    return [delta async for delta in stream]


def test_a_blocked_first_in_line_holds_its_level_until_it_expires(compiled):
    """The pool rule with deadlines: a small sequence of the same level waits behind one that cannot get its
    blocks, though a block is free; when the blocked one's deadline passes the small one joins."""
    _, model = compiled
    size, clock = model.block_size, SteppedClock()
    engine, loop = GenerationEngine(model, cache_blocks=4, clock=clock), asyncio.new_event_loop()
    params = SamplingParams(max_tokens=2 * size, temperature=0, ignore_eos=True)
    prompt = model.codec.encode("the quick brown")  # with 2 blocks of tokens: 3 blocks of the 4
    first = engine.submit(prompt, params, loop)
    big = engine.submit(prompt, params, loop, timeout_s=3)
    small = engine.submit(model.codec.encode("a"), SamplingParams(4, temperature=0, ignore_eos=True), loop)
    for now in (0, 1, 2.9):
        clock.now = now
        engine.run_once()
        assert engine.running == [first] and list(engine.waiting) == [big, small]
    clock.now = 3
    engine.run_once()
    assert engine.running == [first, small] and not engine.waiting
    with pytest.raises(WaitExpired):
        loop.run_until_complete(_read_all(big))
    loop.close()


def _eventually(condition, within_s: float = 5.0) -> None:
    ends = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < ends, "the engine thread did not get there in time"
        time.sleep(0.01)


def test_a_waiter_that_cannot_join_puts_the_engine_thread_to_sleep_until_something_changes(compiled):
    """With the pool full and nothing running to free it, the thread sleeps instead of repeating rounds that do
    nothing; a submit, a waiting deadline and a cancel each wake it for a round."""
    _, model = compiled
    engine, loop = GenerationEngine(model, cache_blocks=4), asyncio.new_event_loop()
    rounds, run_once = [], engine.run_once

    def counted_round():
        rounds.append(time.monotonic())
        run_once()

    engine.run_once = counted_round
    assert engine.batch.reserve("held elsewhere", 4 * model.block_size)  # blocks no sequence of the engine frees
    params = SamplingParams(4, temperature=0, ignore_eos=True)
    blocked = engine.submit([5, 6], params, loop)
    engine.start()
    try:
        time.sleep(0.3)
        assert 1 <= len(rounds) <= 2 and list(engine.waiting) == [blocked]  # spinning, it ran thousands
        expiring = engine.submit([5, 6], params, loop, timeout_s=0.2)
        with pytest.raises(WaitExpired):
            loop.run_until_complete(asyncio.wait_for(_read_all(expiring), 5))
        time.sleep(0.1)
        assert len(rounds) <= 5 and list(engine.waiting) == [blocked]  # woken by the submit and the deadline
        blocked.cancel()
        _eventually(lambda: not engine.waiting)  # woken by the cancel, which drops it
        engine.batch.release("held elsewhere")
        fresh = engine.submit([5, 6], params, loop)
        deltas = loop.run_until_complete(asyncio.wait_for(_read_all(fresh), 30))
        assert len(deltas) == 4 and deltas[-1].finish_reason == "length"
        assert len(rounds) <= 12  # the fresh one's prefill and steps; then asleep again
    finally:
        engine.close()
        loop.close()


def test_weights_read_only_as_packed_panels_are_let_go_after_loading(compiled):
    """The loaded programs keep only the weights some run reads (embeddings, norms), each an array of its own, so
    the file's weight buffer is freed; the projections live on as packed panels only (the tests above check the
    answers against transformers with such models). The tiny GPT-2 is mostly embeddings (and its c_fc is read
    unpacked): copying those would cost more than dropping the rest frees, so it keeps every weight."""
    hf, model = compiled
    programs = [p.program for p in (model.prefill, model.step, model.chunk)]
    kept = {id(a): a for p in programs for a in p.graph.weight_data.values()}
    declared = {n for p in programs for n in p.graph.weights}
    if hf.config.model_type == "gpt2":
        assert len(kept) == len(declared) and all(a.base is not None for a in kept.values())  # views of the file
        return
    assert 0 < len(kept) < len(declared) and all(a.base is None for a in kept.values())
    for p in programs:
        unread = prepack.read_only_packed(p.kernels)
        released = {label for label, buf in p.kernels.weights.items() if buf in unread}
        assert released and not released & set(p.graph.weight_data)
