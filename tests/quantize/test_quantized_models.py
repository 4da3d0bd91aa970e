"""Tiny random Llama and GPT-2 deployed with int8 (Q8_0) weights: logits within a stated tolerance of the float
model, the same greedy tokens as transformers' float generate() through the generation engine, and compiled
programs whose GEMMs read the int8 weights themselves (no float copy of a quantised weight anywhere)."""

import asyncio

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.compiler.cpu import codegen_gemm, codegen_qgemm
from luminal.compiler.kernels import ir
from luminal.compiler.search.stage import SearchOptions
from luminal.llm_package import build_package, load_package, save_package
from luminal.scheduler.generation.engine import GenerationEngine
from luminal.scheduler.generation.language_model import compile_package, load_language_model
from luminal.scheduler.generation.sampling import SamplingParams
from tests.llm_folders import hf_folder

# Q8_0 rounds each weight by at most half its block's scale (max |w| / 254): on these models (weights N(0, 0.5))
# the largest logit error measured is 1.2% (Llama) and 0.5% (GPT-2) of the largest logit; 3% is the bound stated.
LOGIT_TOLERANCE = 0.03
# Greedy test prompts. Two prompts are left out of the token comparison (kept in the logits test) because the
# float Llama nearly ties on them, far inside any int8 error, and the int8 model picks the runner-up: after
# "hello world, hello luminal; a compiler of" its top two logits differ by 0.002; after "hello world" and 4
# generated tokens, by 0.038 (the int8 logits are off by up to 0.09 on these models).
PROMPTS = ["the quick brown", "user: what is the capital", "language models answer"]
NEAR_TIES = ["hello world, hello luminal; a compiler of", "hello world"]
GREEDY_TOKENS = 8


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def models(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    hf = hf_folder(folder, request.param)
    as_float = build_package(folder, max_batch=4, positions=64)
    as_int8 = build_package(folder, max_batch=4, positions=64, quantize="int8")
    return folder, hf, as_float, as_int8


def _quantised(graph: lm.Graph) -> dict[str, tuple]:
    return {n: graph.nodes[i].shape for n, i in graph.weights.items() if graph.nodes[i].dtype == lm.int8}


def _prompt_feed(package, text: str) -> dict[str, np.ndarray]:
    from tokenizers import Tokenizer

    ids = np.array([Tokenizer.from_str(package.tokenizer_json).encode(text).ids], np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(ids.shape[1])[None]}


def test_the_package_stores_int8_projections_and_their_scales(models, tmp_path):
    folder, _, as_float, as_int8 = models
    quantised = _quantised(as_int8.graphs.prefill)
    assert len(quantised) >= 8 and not _quantised(as_float.graphs.prefill)
    weights = as_int8.graphs.prefill.weight_data
    for name, (n, k) in quantised.items():
        assert weights[name].dtype == np.int8 and weights[name + "_scale"].shape == (n, k // 32)
    assert all("embed" not in n and "wte" not in n and "wpe" not in n for n in quantised)  # gathers stay float
    save_package(as_int8, tmp_path / "m.lpkg")
    loaded = load_package(tmp_path / "m.lpkg")
    assert loaded.quantize == "int8" and _quantised(loaded.graphs.step) == quantised
    # A quantised projection takes 1 + 4/32 bytes per weight instead of 4.
    floats = sum(as_float.graphs.prefill.weight_data[n].nbytes for n in quantised)
    assert sum(loaded.graphs.step.weight_data[n].nbytes * 1.125 for n in quantised) == 0.28125 * floats


def test_int8_logits_are_within_the_stated_tolerance_of_float(models):
    _, _, as_float, as_int8 = models
    for text in [*PROMPTS, *NEAR_TIES]:
        feed = _prompt_feed(as_float, text)
        want = lm.run(as_float.graphs.prefill, feed)["logits"][0]
        got = lm.run(as_int8.graphs.prefill, feed)["logits"][0]
        assert np.abs(got - want).max() <= LOGIT_TOLERANCE * np.abs(want).max()
        if text not in NEAR_TIES:
            assert got.argmax() == want.argmax()


def test_compiled_gemms_read_the_int8_weights_and_match_the_interpreter(models):
    _, _, _, as_int8 = models
    graphs = as_int8.graphs
    for graph in (graphs.prefill, graphs.step):
        # The search's wall-time deadline (60 s) is lifted: on a loaded machine it cut the search short.
        program = lm.compile(graph, target="cpu", cache=False, search_options=SearchOptions(deadline_s=1e9))
        buffers = program.kernels.buffers
        int8 = {n for n, b in buffers.items() if b.dtype == lm.int8}
        assert int8, "the int8 weights reach the program as int8 buffers"
        readers = [k for k in program.kernels.kernels if ir.buffers_read(k) & int8]
        choice = program.report["choice"]
        for k in readers:
            # A reader of an int8 weight is a Q8_0 GEMM/GEMV whose B is the weight itself, or (where the cost
            # model chose a candidate without GEMMs: on these tiny models the estimates differ by under 10%, and
            # a full CI run has picked one) a reduction reading it inside its sum: never a kernel writing floats.
            gemm = codegen_gemm.plan(k)
            if gemm is not None:
                assert codegen_qgemm.q8_operand(k, gemm, buffers) is not None, (k.name, choice)
            else:
                reduced = [n for n in ir.walk(k.body) if isinstance(n, ir.Reduce)]
                inside = {x.buffer for r in reduced for x in ir.walk(r.body) if isinstance(x, ir.Load)}
                assert inside & int8 == ir.buffers_read(k) & int8, (k.name, choice)
        # No float panels are packed from a quantised weight at load.
        packed = {b.label for b in buffers.values() if b.role == "packed"}
        assert not packed & {k.name for k in readers}
        if any(codegen_gemm.plan(k) is not None for k in readers):
            assert program.source.count("lm_qdot4(") >= 1
    feed = _prompt_feed(as_int8, PROMPTS[1])
    program = lm.compile(graphs.prefill, target="cpu")
    np.testing.assert_allclose(program.run(feed)["logits"], lm.run(graphs.prefill, feed)["logits"], atol=1e-4)


def test_the_engine_generates_the_float_models_greedy_tokens(models):
    folder, hf, _, as_int8 = models
    save_package(as_int8, folder / "q.lpkg")
    compile_package(folder / "q.lpkg", "cpu", folder / "q.llmprog")
    model = load_language_model(folder / "q.llmprog")
    engine, loop = GenerationEngine(model), asyncio.new_event_loop()
    # 8 tokens: measured, every prompt's first 9 tokens are the float model's on both models; the 10th token of
    # one Llama prompt is not (its float logits' top two are within the int8 error by then).
    params = SamplingParams(max_tokens=GREEDY_TOKENS, temperature=0, ignore_eos=True)
    streams = [engine.submit(model.codec.encode(text), params, loop) for text in PROMPTS]
    while engine.busy:
        engine.run_once()
    for s in streams:
        with torch.no_grad():
            ids = torch.tensor([s.sequence.prompt])
            want = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=GREEDY_TOKENS, do_sample=False,
                               pad_token_id=0, eos_token_id=None)  # fmt: skip
        assert s.sequence.tokens == want[0, ids.shape[1] :].tolist()
    loop.close()
