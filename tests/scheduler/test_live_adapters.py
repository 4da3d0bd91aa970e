"""A worker's engine following its deployment's adapter board between rounds (scheduler/live_adapters.py), on a
tiny Llama with one adapter slot: an adapter posted is loaded and answers as PEFT's merged model does; removed
while a sequence uses it, that sequence finishes with it (its answer unchanged) and the slot stays taken, so an
adapter posted meanwhile fails for want of a slot (reported, not raised) and is loaded once the slot is freed.
Artifacts that are not what they claim are reported with their reason and the engine serves on."""

import asyncio

import numpy as np
import pytest

from luminal.llm_package import build_package, save_package
from luminal.lora_adapter import load_adapter
from luminal.lora_package import encode_adapters
from luminal.scheduler.generation.engine import GenerationEngine, UnknownAdapter
from luminal.scheduler.generation.language_model import compile_package, load_language_model
from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.live_adapters import LiveAdapters
from luminal.scheduler.sequences.adapter_board import MemoryAdapterBoard
from tests.llm_folders import greedy_answer, hf_folder
from tests.lora_adapters import make_adapter

DEPLOYMENT, NEW_TOKENS, PROMPT = 5, 8, [9, 44, 120, 7]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("live_adapters")
    hf = hf_folder(root / "base")
    merged = {
        "first": make_adapter(hf, root / "first", 4, 8, ["q_proj", "v_proj"], seed=1),
        "second": make_adapter(hf, root / "second", 8, 4, ["o_proj", "down_proj"], seed=2),
    }
    save_package(build_package(root / "base", 2, 64, lora_slots=2, lora_rank=8), root / "m.lpkg")  # one slot
    compile_package(root / "m.lpkg", "cpu", root / "m.llmprog")
    artifacts = {}  # artifact key -> file, as a worker's artifact cache gives them
    for name in merged:
        artifacts[name] = root / f"{name}.lora"
        artifacts[name].write_bytes(encode_adapters({name: load_adapter(root / name)}))
    return merged, load_language_model(root / "m.llmprog"), artifacts, root


def _greedy(engine, name, loop):
    return engine.submit(PROMPT, SamplingParams(NEW_TOKENS, temperature=0, ignore_eos=True, lora=name), loop)


def test_removed_while_running_then_the_next_adapter_takes_its_freed_slot(world):
    merged, model, artifacts, _ = world
    board, loop = MemoryAdapterBoard(), asyncio.new_event_loop()
    engine, live = GenerationEngine(model), LiveAdapters(DEPLOYMENT, board, lambda key: artifacts[key])
    live.start(engine, ())
    assert model.lora.slots == {}
    board.post(DEPLOYMENT, "first", "first")
    assert live.follow(engine) and set(model.lora.slots) == {"first"}
    stream = _greedy(engine, "first", loop)
    engine.run_once()
    board.post(DEPLOYMENT, "first", None)
    board.post(DEPLOYMENT, "second", "second")
    assert live.follow(engine)
    assert "all 1 adapter slots are taken" in dict(live.errors())["second"]  # "first"'s sequence still reads it
    with pytest.raises(UnknownAdapter):
        _greedy(engine, "first", loop)  # refused to new sequences at once
    while engine.busy:
        engine.run_once()
        assert not live.follow(engine) or not engine.busy  # nothing changes until the sequence ends
    assert stream.sequence.tokens == greedy_answer(merged["first"], PROMPT, NEW_TOKENS)
    assert set(model.lora.slots) == {"second"} and live.errors() == ()  # loaded once the slot was freed
    second = _greedy(engine, "second", loop)
    while engine.busy:
        engine.run_once()
    assert second.sequence.tokens == greedy_answer(merged["second"], PROMPT, NEW_TOKENS)
    assert second.sequence.tokens != stream.sequence.tokens
    board.post(DEPLOYMENT, "second", None)
    assert live.follow(engine) and model.lora.slots == {}  # retired: refused from now on
    assert live.follow(engine) and not model.lora.retiring  # no sequence reads it: freed the next round
    assert live.follow(engine) is False
    loop.close()


def test_artifacts_that_are_not_what_they_claim_are_reported_and_the_engine_serves_on(world):
    _, model, artifacts, root = world
    (root / "junk.lora").write_bytes(b"not safetensors")
    first = load_adapter(root / "first")
    poisoned = {p: (a.copy(), b.copy()) for p, (a, b) in first.factors.items()}
    next(iter(poisoned.values()))[0][0, 0] = np.nan
    (root / "nan.lora").write_bytes(encode_adapters({"nan": type(first)(first.base, first.rank, poisoned)}))
    files = {**artifacts, "junk": root / "junk.lora", "nan": root / "nan.lora"}
    board = MemoryAdapterBoard()
    engine, live = GenerationEngine(model), LiveAdapters(DEPLOYMENT, board, lambda key: files[key])
    board.post(DEPLOYMENT, "junk", "junk")
    board.post(DEPLOYMENT, "nan", "nan")
    board.post(DEPLOYMENT, "renamed", "first")  # the artifact holds "first", not "renamed"
    board.post(DEPLOYMENT, "gone", "no-such-key")
    live.start(engine, ())
    errors = dict(live.errors())
    assert set(errors) == {"junk", "nan", "renamed", "gone"} and model.lora.slots == {}
    assert "NaN" in errors["nan"] and "not 'renamed'" in errors["renamed"] and "KeyError" in errors["gone"]
    assert live.follow(engine) is False  # a failure is not tried again until its post changes or a slot frees
    loop = asyncio.new_event_loop()
    base = engine.submit(PROMPT, SamplingParams(3, temperature=0, ignore_eos=True), loop)
    while engine.busy:
        engine.run_once()
    assert len(base.sequence.tokens) == 3
    for name in errors:
        board.post(DEPLOYMENT, name, None)
    assert live.follow(engine) and live.errors() == ()
    loop.close()
