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


@pytest.mark.parametrize("name", MODELS)
def test_left_padded_batch_generates_as_hugging_face(name):
    """Prompts of 6, 3 and 5 tokens in one batch, left-padded: positions count from each row's first token."""
    ours, config = MODELS[name]
    hf, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, config)
    graphs = decoder_graphs(ours(config.to_dict()), max_positions=32, padded=True).bind(weights)
    prompt, _ = token_batch(40, 3, 6, seed=6)
    mask = np.ones_like(prompt)
    for row, pad in ((1, 3), (2, 1)):
        mask[row, :pad], prompt[row, :pad] = 0, 0
    steps = []
    got = greedy_generate(graphs, prompt, NEW_TOKENS, attention_mask=mask, run=lambda g, f: _kept(steps, g, f))
    with torch.no_grad():
        want = hf.generate(torch.from_numpy(prompt), attention_mask=torch.from_numpy(mask),
                           max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)  # fmt: skip
        full_mask = np.concatenate([mask, np.ones((3, NEW_TOKENS), np.int64)], axis=1)
        positions = torch.from_numpy(np.maximum(full_mask.cumsum(-1) - 1, 0))  # from each row's first token
        full = hf(want, attention_mask=torch.from_numpy(full_mask), position_ids=positions).logits.numpy()
    np.testing.assert_array_equal(got, want.numpy())
    for k, logits in enumerate(steps):  # the greedy tokens alone would hardly notice shifted positions
        assert max_error(logits, full[:, prompt.shape[1] - 1 + k]) < 1e-4


def _kept(steps, graph, feed):
    out = lm.run(graph, feed)
    steps.append(out["logits"])
    return out
