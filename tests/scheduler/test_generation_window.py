"""Sliding-window models (Mistral's and Phi-3's window on every layer; Qwen2's, Qwen3's, Gemma 2's and Gemma 3's on
some; Qwen3 with its q/k norms and tied head; Phi-3 with its fused projections, partial rotary and longrope; the
mixtures of experts Mixtral and Qwen3-MoE, windowed on every layer) are packaged with the paged step and chunk
graphs and served through them: prompts longer than the window (and Phi-3's original context), prefilled in chunks
that cross blocks and sharing a prefix's blocks, each complete as transformers' generate() does alone."""

import asyncio

import pytest

from luminal.llm_package import build_package, save_package
from luminal.scheduler.generation.engine import GenerationEngine
from luminal.scheduler.generation.language_model import compile_package, load_language_model
from luminal.scheduler.generation.sampling import SamplingParams
from tests.llm_folders import WINDOW, greedy_answer, hf_folder

BLOCK = 4  # positions per block: smaller than the window, so windows span blocks and start inside them


@pytest.fixture(
    scope="module", params=["mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "mixtral", "qwen3_moe"]
)
def windowed(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    hf = hf_folder(folder, request.param)
    package = build_package(folder, max_batch=4, positions=64, block_size=BLOCK)
    assert package.paged is not None and package.chunk is not None  # no fallback to the concatenating step
    save_package(package, folder / "m.lpkg")
    compile_package(folder / "m.lpkg", "cpu", folder / "m.llmprog")
    return hf, load_language_model(folder / "m.llmprog")


def test_windowed_sequences_served_paged_equal_generate(windowed):
    hf, model = windowed
    assert model.block_size == BLOCK and model.chunk is not None
    engine, loop = GenerationEngine(model, prefill_chunk=5), asyncio.new_event_loop()
    text = "the quick brown fox jumps over the lazy dog"
    prompts = [model.codec.encode(text), model.codec.encode(text + ", hello world")]
    assert min(len(p) for p in prompts) > 2 * WINDOW
    params = SamplingParams(max_tokens=10, temperature=0, ignore_eos=True)
    first = engine.submit(prompts[0], params, loop)
    while first not in engine.running:  # its prompt's blocks written and published
        engine.run_once()
    second = engine.submit(prompts[1], params, loop)
    engine.run_once()
    assert engine.batch.pool.shared[id(second)] >= 2  # its prefill reads the first's blocks, windowed
    while engine.busy:
        engine.run_once()
    assert engine.chunked.chunks > len(prompts)  # prompts prefilled in several chunks each
    assert engine.batch.pool.in_use == 0
    for s in (first, second):
        assert s.sequence.tokens == greedy_answer(hf, s.sequence.prompt, 10)
    loop.close()
