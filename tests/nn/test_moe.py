"""Mixtures of experts (Mixtral, Qwen3-MoE) against transformers' models with the same random weights: logits of
the full forward pass (reference interpreter and compiled for the CPU), greedy decoding through the concatenating
step, a checkpoint saved by save_pretrained (experts stored apart), the router's top-k against torch.topk, that
a token's output depends on the experts it chose and on no other, and what is refused (int8: tests/quantize)."""

import numpy as np
import pytest
import torch
import transformers

import luminal as lm
from luminal.nn.models.expert_checkpoint import stack_experts
from luminal.nn.models.generation import decoder_graphs, greedy_generate
from luminal.nn.models.llama import LlamaForCausalLM
from luminal.nn.models.loading import graph_from_folder
from luminal.nn.moe import SparseMoeBlock, top_k
from tests.nn.hf import max_error, tiny_model, token_batch

BASE = dict(vocab_size=40, hidden_size=24, intermediate_size=36, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=32)  # fmt: skip
CASES = {
    # 4 experts, 2 per token, renormalised; a window shorter than the prompt.
    "mixtral-window": transformers.MixtralConfig(**BASE, num_local_experts=4, num_experts_per_tok=2,
                                                 sliding_window=3),
    # Layer 0 dense (mlp_only_layers) with its own width, layer 1 sparse; probabilities not renormalised.
    "qwen3moe-dense-layer": transformers.Qwen3MoeConfig(**BASE, num_experts=4, num_experts_per_tok=2,
                                                        moe_intermediate_size=20, mlp_only_layers=[0]),
    # Renormalised top 3 of 5, head_dim apart from hidden / heads, biases, a window on every layer.
    "qwen3moe-norm-window": transformers.Qwen3MoeConfig(**BASE, num_experts=5, num_experts_per_tok=3,
                                                        moe_intermediate_size=20, norm_topk_prob=True, head_dim=8,
                                                        attention_bias=True, use_sliding_window=True,
                                                        sliding_window=3),
}  # fmt: skip


def _logits_graph(config):
    g = lm.Graph()
    shape = (lm.sym("batch"), lm.sym("seq", max=32))
    inputs = g.input("input_ids", shape, lm.int64), g.input("attention_mask", shape, lm.int64)
    LlamaForCausalLM(config)(*inputs)[0].output("logits")
    return g


def _hf_logits(hf, ids, mask):
    with torch.no_grad():
        return hf(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()


@pytest.mark.parametrize("case", CASES)
def test_logits_match_hugging_face(case):
    hf, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, CASES[case])
    ids, mask = token_batch(40, 2, 7, pad_tail=2)
    g = _logits_graph(CASES[case].to_dict()).bind(weights)
    assert not g.unbound_weights()
    want, feed = _hf_logits(hf, ids, mask), {"input_ids": ids, "attention_mask": mask}
    assert max_error(lm.run(g, feed)["logits"], want) < 1e-4
    assert max_error(lm.compile(g, target="cpu", cache=False).run(feed)["logits"], want) < 1e-4


def test_greedy_decoding_through_the_step_matches_hugging_face():
    """Prefill, then decode steps over the concatenated cache: tokens as generate(), each step's logits as a
    full forward pass over the sequence so far (a dense and a sparse layer)."""
    config = CASES["qwen3moe-dense-layer"]
    hf, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, config)
    graphs = decoder_graphs(LlamaForCausalLM(config.to_dict()), max_positions=32).bind(weights)
    prompt, _ = token_batch(40, 2, 5, seed=3)
    steps = []
    got = greedy_generate(graphs, prompt, 4, run=lambda g, f: steps.append(lm.run(g, f)) or steps[-1])
    with torch.no_grad():
        want = hf.generate(torch.from_numpy(prompt), max_new_tokens=4, do_sample=False,
                           attention_mask=torch.ones(prompt.shape, dtype=torch.int64), pad_token_id=0)  # fmt: skip
        full = hf(want).logits.numpy()
    np.testing.assert_array_equal(got, want.numpy())
    for k, out in enumerate(steps):
        assert max_error(out["logits"], full[:, prompt.shape[1] - 1 + k]) < 1e-4


def test_a_saved_checkpoint_with_experts_apart_loads(tmp_path):
    """save_pretrained writes each expert's gate_proj / up_proj / down_proj apart; loading stacks them."""
    config = CASES["qwen3moe-dense-layer"]
    hf, _ = tiny_model(transformers.AutoModelForCausalLM.from_config, config)
    hf.save_pretrained(tmp_path)
    g = graph_from_folder(tmp_path, max_batch=2, max_seq=8)
    ids, mask = token_batch(40, 2, 7, pad_tail=2)
    got = lm.run(g, {"input_ids": ids, "attention_mask": mask})["logits"]
    assert max_error(got, _hf_logits(hf, ids, mask)) < 1e-4


def test_top_k_matches_torch_and_breaks_ties_by_index():
    x = np.random.default_rng(0).normal(size=(3, 5, 7)).astype(np.float32)
    g = lm.Graph()
    values, indices = top_k(g.input("x", (3, 5, 7)), 3)
    values.output("values"), indices.output("indices")
    out = lm.run(g, {"x": x})
    want = torch.topk(torch.from_numpy(x), 3)
    np.testing.assert_array_equal(out["values"], want.values.numpy())
    np.testing.assert_array_equal(out["indices"], want.indices.numpy())
    tied = np.array([[[1, 2, 2, 0.5, 2, 2, 0]]], np.float32).repeat(3, 0).repeat(5, 1)  # of equal values: lowest index
    np.testing.assert_array_equal(lm.run(g, {"x": tied})["indices"][0, 0], [1, 2, 4])


def test_an_expert_changes_only_the_tokens_routed_to_it():
    rng = np.random.default_rng(1)
    g = lm.Graph()
    SparseMoeBlock(16, 8, 4, 2, renormalize=True)(g.input("x", (12, 16))).output("y")
    weights = {"gate.weight": rng.normal(size=(4, 16)), "experts.gate_up_proj": rng.normal(size=(4, 16, 16)),
               "experts.down_proj": rng.normal(size=(4, 16, 8))}  # fmt: skip
    weights = {k: v.astype(np.float32) for k, v in weights.items()}
    x = rng.normal(size=(12, 16)).astype(np.float32)
    before = lm.run(g.bind(weights), {"x": x})["y"]
    weights["experts.down_proj"] = weights["experts.down_proj"].copy()
    weights["experts.down_proj"][2] += 1
    after = lm.run(g.bind(weights), {"x": x})["y"]
    routed = np.isin(torch.topk(torch.from_numpy(x @ weights["gate.weight"].T), 2).indices.numpy(), 2).any(-1)
    assert 0 < routed.sum() < len(x)
    changed = np.abs(after - before).max(-1) > 0
    np.testing.assert_array_equal(changed, routed)


def test_refusals():
    with pytest.raises(NotImplementedError, match="num_experts_per_tok 5"):
        LlamaForCausalLM({**CASES["mixtral-window"].to_dict(), "num_experts_per_tok": 5})
    apart = {f"m.layers.0.mlp.experts.{e}.{p}.weight": np.zeros((2, 2)) for e in (0, 2) for p in ("w1", "w3", "w2")}
    with pytest.raises(ValueError, match=r"experts \[0, 2\] hold w1.weight"):
        stack_experts(apart)
