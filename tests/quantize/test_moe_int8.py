"""Mixtures of experts in int8 (Q8_0): the stacked experts are quantised with the projections (the router stays
float32), each token gathers its experts' int8 rows and scales and dequantises only those. The reference is
transformers over the same weights rounded to Q8_0 (tests/quantize/q8_0_rounding.py): logits of the full forward
pass, interpreted and compiled for the CPU, and greedy completions served through the paged engine with prompts
longer than the sliding window."""

import asyncio

import pytest
import torch
import transformers

import luminal as lm
from luminal.llm_package import build_package, save_package
from luminal.nn.models.llama import LlamaForCausalLM
from luminal.nn.quantized import quantize_checkpoint
from luminal.scheduler.generation.engine import GenerationEngine
from luminal.scheduler.generation.language_model import compile_package, load_language_model
from luminal.scheduler.generation.sampling import SamplingParams
from tests.llm_folders import WINDOW, greedy_answer, hf_folder
from tests.nn.hf import max_error, tiny_model, token_batch
from tests.nn.modcheck import state_dict_numpy
from tests.quantize.q8_0_rounding import round_to_q8_0

SHAPE = dict(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=32)  # fmt: skip
CASES = {
    "mixtral": transformers.MixtralConfig(**SHAPE, num_local_experts=4, num_experts_per_tok=2, sliding_window=3),
    # A dense layer 0 beside the sparse one; renormalised top 3 of 5 experts of width 32.
    "qwen3moe": transformers.Qwen3MoeConfig(**SHAPE, num_experts=5, num_experts_per_tok=3, moe_intermediate_size=32,
                                            norm_topk_prob=True, mlp_only_layers=[0]),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_int8_experts_give_transformers_logits_over_the_rounded_weights(case):
    hf, _ = tiny_model(transformers.AutoModelForCausalLM.from_config, CASES[case])
    round_to_q8_0(hf)
    g = lm.Graph()
    shape = (lm.sym("batch"), lm.sym("seq", max=32))
    inputs = g.input("input_ids", shape, lm.int64), g.input("attention_mask", shape, lm.int64)
    model = LlamaForCausalLM(CASES[case].to_dict(), quantize="int8")
    model(*inputs)[0].output("logits")
    g.bind(quantize_checkpoint(model, state_dict_numpy(hf)))
    assert not g.unbound_weights()
    dtypes = {name: g.nodes[i].dtype for name, i in g.weights.items()}
    assert dtypes["model.layers.1.mlp.experts.gate_up_proj"] == lm.int8
    assert dtypes["model.layers.1.mlp.experts.down_proj"] == lm.int8
    assert dtypes["model.layers.1.mlp.gate.weight"] == lm.float32  # the router chooses in float
    ids, mask = token_batch(40, 2, 7, pad_tail=2)
    feed = {"input_ids": ids, "attention_mask": mask}
    with torch.no_grad():
        want = hf(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    assert max_error(lm.run(g, feed)["logits"], want) < 1e-4
    assert max_error(lm.compile(g, target="cpu", cache=False).run(feed)["logits"], want) < 1e-4


def test_an_int8_mixture_is_served_paged_as_generate_over_the_rounded_weights(tmp_path):
    hf = hf_folder(tmp_path, "mixtral_int8")
    assert round_to_q8_0(hf) == 2 * (4 + 2) + 1  # per layer q, k, v, o and the two stacks; the head
    hf.save_pretrained(tmp_path, safe_serialization=True)
    package = build_package(tmp_path, max_batch=2, positions=64, block_size=4, quantize="int8")
    save_package(package, tmp_path / "m.lpkg")
    compile_package(tmp_path / "m.lpkg", "cpu", tmp_path / "m.llmprog")
    model = load_language_model(tmp_path / "m.llmprog")
    step = model.step.program.graph
    int8 = {name for name, i in step.weights.items() if step.nodes[i].dtype == lm.int8}
    assert any(name.endswith("experts.down_proj") for name in int8)
    engine, loop = GenerationEngine(model, prefill_chunk=5), asyncio.new_event_loop()
    text = "the quick brown fox jumps over the lazy dog"
    prompts = [model.codec.encode(text), model.codec.encode(text + ", hello world")]
    assert min(len(p) for p in prompts) > 2 * WINDOW
    params = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
    streams = [engine.submit(p, params, loop) for p in prompts]
    while engine.busy:
        engine.run_once()
    loop.close()
    for s in streams:
        assert s.sequence.tokens == greedy_answer(hf, s.sequence.prompt, 8)
