"""A tiny Llama deployed with quantize="w8a8" (int8 weights, and each projection's input rows quantised to Q8_0 in
the graph): its package, its logits beside the weight-only int8 model's, and the compiled engine's greedy tokens
against the reference interpreter's on the package's own graph."""

import asyncio

import numpy as np
import pytest
import transformers

import luminal as lm
from luminal.compiler.search.stage import SearchOptions
from luminal.llm_package import build_package, load_package, save_package
from luminal.scheduler.generation.engine import GenerationEngine
from luminal.scheduler.generation.language_model import compile_package, load_language_model
from luminal.scheduler.generation.sampling import SamplingParams
from tests import llm_folders

PROMPTS = ["the quick brown", "user: what is the capital", "language models answer"]
GREEDY_TOKENS = 8
# The activations' rounding (half a block's scale, max |x| / 254, on every input of every projection) moves these
# logits (random weights N(0, 0.5)) by up to 8.5% of the largest beside the int8 model's, measured; 10% is the bound.
LOGIT_TOLERANCE = 0.1
# Wider than the tests' tiny Llama (hidden 32, intermediate 48) so that every projection's input is whole Q8_0
# blocks and the GEMMs are large enough for the int8 x int8 kernel to be the compiler's choice.
WIDE = dict(llm_folders.LLAMA, hidden_size=256, intermediate_size=512)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama_w8a8")
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(llm_folders.CONFIGS, "llama_wide", (transformers.LlamaConfig, WIDE))
        llm_folders.hf_folder(folder, "llama_wide")
    int8 = build_package(folder, max_batch=16, positions=64, quantize="int8")
    return folder, build_package(folder, max_batch=16, positions=64, quantize="w8a8"), int8


def _ids(package, text: str) -> list[int]:
    from tokenizers import Tokenizer

    return Tokenizer.from_str(package.tokenizer_json).encode(text).ids


def _logits(graph: lm.Graph, ids: list[int]) -> np.ndarray:
    ids_ = np.array([ids], np.int64)
    feed = {"input_ids": ids_, "attention_mask": np.ones_like(ids_), "position_ids": np.arange(len(ids))[None]}
    return lm.run(graph, feed)["logits"][0]  # the last position's


def test_the_package_is_w8a8_and_its_logits_are_near_the_int8_models(packages, tmp_path):
    _, w8a8, int8 = packages
    save_package(w8a8, tmp_path / "m.lpkg")
    loaded = load_package(tmp_path / "m.lpkg")
    assert loaded.quantize == "w8a8"
    assert loaded.graphs.step.weight_data["model.layers.0.mlp.down_proj.weight"].dtype == np.int8
    for text in PROMPTS:
        ids = _ids(w8a8, text)
        got, want = _logits(w8a8.graphs.prefill, ids), _logits(int8.graphs.prefill, ids)
        assert not np.array_equal(got, want)  # the inputs are quantised too
        assert np.abs(got - want).max() <= LOGIT_TOLERANCE * np.abs(want).max()
        assert got.argmax() == want.argmax()


def test_compiled_step_multiplies_int8_by_int8(packages):
    _, w8a8, _ = packages
    program = lm.compile(w8a8.paged, target="cpu", cache=False, search_options=SearchOptions(deadline_s=1e9))
    assert program.source.count("lm_q8q8dot4x4(") >= 1, program.report["choice"]


@pytest.mark.parametrize("graph", ["prefill", "chunk"])
def test_compiled_prompt_graphs_multiply_int8_by_int8(packages, graph):
    """The prompt's graphs hold rows under two sizes (batch and sequence, or rows and chunk positions), whose
    activation scales are read through a division by a symbolic size (compiler/cpu/fuse_dequant.py)."""
    _, w8a8, _ = packages
    g = w8a8.graphs.prefill if graph == "prefill" else w8a8.chunk
    program = lm.compile(g, target="cpu", cache=False, search_options=SearchOptions(deadline_s=1e9))
    assert "lm_q8q8dot4x4(" in program.source and "lm_qdot4(" not in program.source, program.report["choice"]


def test_the_engine_generates_the_interpreters_greedy_tokens(packages):
    folder, w8a8, _ = packages
    save_package(w8a8, folder / "w.lpkg")
    compile_package(folder / "w.lpkg", "cpu", folder / "w.llmprog")
    model = load_language_model(folder / "w.llmprog")
    engine, loop = GenerationEngine(model), asyncio.new_event_loop()
    params = SamplingParams(max_tokens=GREEDY_TOKENS, temperature=0, ignore_eos=True)
    streams = [engine.submit(_ids(w8a8, text), params, loop) for text in PROMPTS]
    while engine.busy:
        engine.run_once()
    loop.close()
    for s in streams:
        ids = list(s.sequence.prompt)
        for _ in range(GREEDY_TOKENS):  # the reference interpreter over the whole sequence, one token at a time
            ids.append(int(_logits(w8a8.graphs.prefill, ids).argmax()))
        assert s.sequence.tokens == ids[len(s.sequence.prompt) :]
