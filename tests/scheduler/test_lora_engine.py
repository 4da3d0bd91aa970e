"""Multi-LoRA through the package and the engine: `build_package(lora=...)` packs PEFT adapters, the compiled
model installs them, and the engine runs sequences with two adapters and the base in one batch (prefilled in
chunks, then decoded in shared steps), each equal to transformers' greedy answer with PEFT's merged adapter; an
adapter that does not fit the package is refused naming why, an unknown one at submit."""

import asyncio

import pytest

from luminal.llm_package import build_package, load_package, save_package
from luminal.lora_adapter import LoraRefused, load_adapter
from luminal.scheduler.generation.engine import GenerationEngine, UnknownAdapter
from luminal.scheduler.generation.language_model import compile_package, load_language_model
from luminal.scheduler.generation.sampling import SamplingParams
from tests.llm_folders import greedy_answer, hf_folder
from tests.lora_adapters import make_adapter, make_adapters

NEW_TOKENS = 6


@pytest.fixture(scope="module")
def lora_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora")
    hf = hf_folder(root / "base")
    merged = make_adapters(hf, root)
    package = build_package(root / "base", max_batch=4, positions=64, lora={n: root / n for n in merged})
    save_package(package, root / "m.lpkg")
    assert set(load_package(root / "m.lpkg").adapters) == set(merged)
    compile_package(root / "m.lpkg", "cpu", root / "m.llmprog")
    return hf, merged, load_language_model(root / "m.llmprog"), root


def test_two_adapters_and_the_base_share_the_batch(lora_model):
    hf, merged, model, _ = lora_model
    engine, loop = GenerationEngine(model), asyncio.new_event_loop()
    prompt = model.codec.encode("the quick brown fox")
    rows = ["terse", None, "chatty", None]
    streams = [
        engine.submit(prompt, SamplingParams(NEW_TOKENS, temperature=0, ignore_eos=True, lora=name), loop)
        for name in rows
    ]
    engine.run_once()
    assert engine.batch.rows == 4  # all four prefilled and stepping together
    while engine.busy:
        engine.run_once()
    for stream, name in zip(streams, rows):
        want = greedy_answer(merged[name] if name else hf, prompt, NEW_TOKENS)
        assert stream.sequence.tokens == want, name
    assert streams[0].sequence.tokens != streams[1].sequence.tokens != streams[2].sequence.tokens
    # The two base rows shared their prompt blocks; the adapters' rows (other keys and values) did not.
    assert engine.batch.pool.reused_tokens == (len(prompt) - 1) // model.block_size * model.block_size
    loop.close()


def test_an_unknown_adapter_is_refused_at_submit(lora_model):
    _, _, model, _ = lora_model
    with pytest.raises(UnknownAdapter, match="'nope' is not loaded"):
        GenerationEngine(model).submit([2, 3], SamplingParams(2, lora="nope"), asyncio.new_event_loop())


def test_an_adapter_wider_than_the_slots_is_refused_at_build(lora_model, tmp_path):
    hf, _, _, root = lora_model
    make_adapter(hf, tmp_path / "wide", 12, 8, ["q_proj"], seed=5)
    with pytest.raises(LoraRefused, match="wide: LoRA adapter: rank 12 is over .* maximum rank 8"):
        build_package(root / "base", max_batch=4, positions=64, lora={"wide": tmp_path / "wide"}, lora_rank=8)


def test_adapters_added_and_removed_while_the_batch_runs(lora_model):
    """Removing an adapter refuses it to new sequences at once and lets its running ones finish with it; its
    slot is cleared when they end. An adapter added between steps serves the next sequence that names it."""
    hf, merged, model, root = lora_model
    engine, loop = GenerationEngine(model), asyncio.new_event_loop()
    bank = model.lora
    prompt = model.codec.encode("language models")
    running = engine.submit(prompt, SamplingParams(NEW_TOKENS, temperature=0, ignore_eos=True, lora="terse"), loop)
    engine.run_once()
    slot = running.lora_slot
    engine.remove_adapter("terse")
    with pytest.raises(UnknownAdapter):
        engine.submit(prompt, SamplingParams(2, lora="terse"), loop)
    engine.run_once()
    assert slot in bank.retiring and bank.arrays[next(iter(bank.arrays))][slot].any()  # still read
    engine.add_adapter("terse-again", load_adapter(root / "terse"))  # a free slot, not the retiring one
    assert bank.slots["terse-again"] != slot
    again = engine.submit(prompt, SamplingParams(NEW_TOKENS, temperature=0, ignore_eos=True, lora="terse-again"), loop)
    while engine.busy:
        engine.run_once()
    want = greedy_answer(merged["terse"], prompt, NEW_TOKENS)
    assert running.sequence.tokens == want and again.sequence.tokens == want
    assert not bank.retiring and not any(a[slot].any() for a in bank.arrays.values())
    engine.remove_adapter("terse-again")
    engine.run_once()
    engine.add_adapter("terse", load_adapter(root / "terse"))  # as deployed, for the other tests
    make_adapter(hf, root / "wide-live", 20, 8, ["q_proj"], seed=6)
    with pytest.raises(LoraRefused, match="rank 20 is over this deployment's maximum rank 16"):
        engine.add_adapter("wide", load_adapter(root / "wide-live"))
    loop.close()
