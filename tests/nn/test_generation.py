"""KV-cache decoding: the prefill + decode-step graphs' greedy tokens equal transformers' generate(), and each
step's logits equal a full forward pass over the sequence so far (GPT-2 and a grouped-query Llama)."""

import numpy as np
import pytest
import torch
import transformers

import luminal as lm
from luminal.nn.models.generation import decoder_graphs, greedy_generate
from luminal.nn.models.gpt2 import GPT2LMHeadModel
from luminal.nn.models.llama import LlamaForCausalLM
from tests.nn.hf import max_error, tiny_model, token_batch

MODELS = {
    "gpt2": (GPT2LMHeadModel, transformers.GPT2Config(vocab_size=40, n_positions=32, n_embd=24, n_layer=2, n_head=3)),
    "llama": (LlamaForCausalLM, transformers.LlamaConfig(vocab_size=40, hidden_size=24, intermediate_size=36,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, rope_theta=100.0)),
}  # fmt: skip
NEW_TOKENS = 4


@pytest.mark.parametrize("name", MODELS)
def test_greedy_generation_matches_hugging_face(name):
    ours, config = MODELS[name]
    hf, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, config)
    graphs = decoder_graphs(ours(config.to_dict()), max_positions=32).bind(weights)
    prompt, _ = token_batch(40, 2, 5, seed=3)
    steps = []

    def run_and_check(graph, feed):  # every step's logits against a full forward pass over the tokens so far
        out = lm.run(graph, feed)
        steps.append(out["logits"])
        return out

    got = greedy_generate(graphs, prompt, NEW_TOKENS, run=run_and_check)
    with torch.no_grad():
        want = hf.generate(torch.from_numpy(prompt), max_new_tokens=NEW_TOKENS, do_sample=False,
                           attention_mask=torch.ones(prompt.shape, dtype=torch.int64), pad_token_id=0)  # fmt: skip
        full = hf(want).logits.numpy()
    np.testing.assert_array_equal(got, want.numpy())
    for k, logits in enumerate(steps):  # logits after prompt + k tokens
        assert max_error(logits, full[:, prompt.shape[1] - 1 + k]) < 1e-4
    assert len(steps) == NEW_TOKENS


def test_compiled_decoding_generates_the_same_tokens():
    """Both graphs through lm.compile(target="cpu"): the symbolic cache length survives compilation."""
    ours, config = MODELS["llama"]
    _, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, config)
    graphs = decoder_graphs(ours(config.to_dict()), max_positions=32).bind(weights)
    programs = {id(g): lm.compile(g, target="cpu", cache=False) for g in (graphs.prefill, graphs.step)}
    prompt, _ = token_batch(40, 2, 5, seed=4)
    compiled = greedy_generate(graphs, prompt, NEW_TOKENS, run=lambda g, feed: programs[id(g)].run(feed))
    np.testing.assert_array_equal(compiled, greedy_generate(graphs, prompt, NEW_TOKENS))
