"""Multi-LoRA over an int8 (Q8_0) base: the adapters' low-rank terms stay float32 beside the quantised
projections. The reference is transformers with PEFT's merged adapter over the base's Q8_0 weights rounded
(quantised and dequantised), so quantising them again for the package changes nothing and int8 serving must give
the reference's greedy tokens exactly; two adapters and the base share the engine's batch."""

import asyncio

import pytest

from luminal.llm_package import build_package, save_package
from luminal.scheduler.generation.engine import GenerationEngine
from luminal.scheduler.generation.language_model import compile_package, load_language_model
from luminal.scheduler.generation.sampling import SamplingParams
from tests.llm_folders import greedy_answer, hf_folder
from tests.lora_adapters import make_adapters
from tests.quantize.q8_0_rounding import round_to_q8_0

NEW_TOKENS = 6


@pytest.fixture(scope="module")
def int8_lora(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora_int8")
    hf = hf_folder(root / "base")
    assert round_to_q8_0(hf) > 0
    hf.save_pretrained(root / "base", safe_serialization=True)
    merged = make_adapters(hf, root)
    package = build_package(root / "base", 4, 64, quantize="int8", lora={n: root / n for n in merged})
    save_package(package, root / "m.lpkg")
    compile_package(root / "m.lpkg", "cpu", root / "m.llmprog")
    return hf, merged, load_language_model(root / "m.llmprog")


def test_adapters_over_an_int8_base_equal_merged_peft_over_its_rounded_weights(int8_lora):
    hf, merged, model = int8_lora
    step = model.step.program.graph
    assert any(step.nodes[w].dtype.name == "int8" for w in step.weights.values())  # the base is int8
    engine, loop = GenerationEngine(model), asyncio.new_event_loop()
    prompt = model.codec.encode("hello world, hello luminal")
    rows = ["chatty", None, "terse"]
    streams = [
        engine.submit(prompt, SamplingParams(NEW_TOKENS, temperature=0, ignore_eos=True, lora=name), loop)
        for name in rows
    ]
    engine.run_once()
    assert engine.batch.rows == 3
    while engine.busy:
        engine.run_once()
    answers = [s.sequence.tokens for s in streams]
    for tokens, name in zip(answers, rows):
        assert tokens == greedy_answer(merged[name] if name else hf, prompt, NEW_TOKENS), name
    assert len({tuple(t) for t in answers}) == 3
    loop.close()
