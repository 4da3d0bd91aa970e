"""KV-cache decoding: the prefill + decode-step graphs' greedy tokens equal transformers' generate(), and each
step's logits equal a full forward pass over the sequence so far (GPT-2, a grouped-query Llama, Gemma 2 and 3, and
a Qwen3 with its q/k norms, a head_dim apart from hidden / heads, tied embeddings and a sliding window on its second
layer), or with rope scaling (Phi-3's longrope among it) generate()'s own logits."""

import numpy as np
import pytest
import torch
import transformers

import luminal as lm
from luminal.nn.models.gemma import GemmaForCausalLM
from luminal.nn.models.generation import allowed_probabilities, decoder_graphs, greedy_generate, sample_generate
from luminal.nn.models.gpt2 import GPT2LMHeadModel
from luminal.nn.models.llama import LlamaForCausalLM
from tests.nn.hf import max_error, tiny_model, token_batch
from tests.nn.rope_cases import phi3_longrope, scaled_llama
from tests.nn.test_gemma import CASES as GEMMA

MODELS = {
    "gpt2": (GPT2LMHeadModel, transformers.GPT2Config(vocab_size=40, n_positions=32, n_embd=24, n_layer=2, n_head=3)),
    "llama": (LlamaForCausalLM, transformers.LlamaConfig(vocab_size=40, hidden_size=24, intermediate_size=36,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, rope_theta=100.0)),
    "qwen3": (LlamaForCausalLM, transformers.Qwen3Config(vocab_size=40, hidden_size=24, intermediate_size=36,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8, rope_theta=100.0,
              tie_word_embeddings=True, use_sliding_window=True, sliding_window=3, max_window_layers=1)),
    # Windows of 3 (shorter than the prompts), soft-caps; no end token, so that generate() runs every step.
    "gemma2": (GemmaForCausalLM, GEMMA["gemma2"](eos_token_id=None)),
    "gemma3": (GemmaForCausalLM, GEMMA["gemma3"](eos_token_id=None)),
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


@pytest.mark.parametrize("case", ["llama3-tied", "dynamic", "yarn", "phi3-longrope"])
def test_scaled_rope_greedy_generation_matches_hugging_face(case):
    """A 12-token prompt over a context of 8 and 6 new tokens; dynamic's base grows with every step, as
    transformers' does, so each step is compared with generate()'s own logits, not a full forward pass."""
    # eos None: every row runs every step, as greedy_generate's do
    config = phi3_longrope(eos_token_id=None) if case == "phi3-longrope" else scaled_llama(case, eos_token_id=None)
    hf, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, config)
    graphs = decoder_graphs(LlamaForCausalLM(config.to_dict()), max_positions=32).bind(weights)
    prompt, _ = token_batch(40, 2, 12, seed=5)
    steps = []
    got = greedy_generate(graphs, prompt, 6, run=lambda g, f: _kept(steps, g, f))
    with torch.no_grad():
        want = hf.generate(torch.from_numpy(prompt), max_new_tokens=6, do_sample=False, pad_token_id=0,
                           attention_mask=torch.ones(prompt.shape, dtype=torch.int64), return_dict_in_generate=True,
                           output_logits=True)  # fmt: skip
    np.testing.assert_array_equal(got, want.sequences.numpy())
    for logits, expected in zip(steps, want.logits, strict=True):
        assert max_error(logits, expected.numpy()) < 1e-4


def _kept(steps, graph, feed):
    out = lm.run(graph, feed)
    steps.append(out["logits"])
    return out


LONG_MODELS = {
    "gpt2": (GPT2LMHeadModel, transformers.GPT2Config(vocab_size=40, n_positions=64, n_embd=24, n_layer=2, n_head=3)),
    "llama": MODELS["llama"],
    "mistral": (LlamaForCausalLM, transformers.MistralConfig(vocab_size=40, hidden_size=24, intermediate_size=36,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, sliding_window=8)),
}  # fmt: skip


def _compiled(graphs):
    programs = {id(g): lm.compile(g, target="cpu") for g in (graphs.prefill, graphs.step)}
    return lambda g, feed: programs[id(g)].run(feed)


@pytest.mark.parametrize("name", LONG_MODELS)
def test_thirty_two_greedy_tokens_match_hugging_face(name):
    """32 new tokens, token for token with generate(), the graphs compiled for the CPU (the interpreter would
    take minutes: it materialises every matmul product)."""
    ours, config = LONG_MODELS[name]
    hf, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, config)
    graphs = decoder_graphs(ours(config.to_dict()), max_positions=64).bind(weights)
    prompt, _ = token_batch(40, 2, 5, seed=8)
    got = greedy_generate(graphs, prompt, 32, run=_compiled(graphs), eos_token_id=config.eos_token_id)
    with torch.no_grad():
        want = hf.generate(torch.from_numpy(prompt), max_new_tokens=32, do_sample=False,
                           attention_mask=torch.ones(prompt.shape, dtype=torch.int64), pad_token_id=0)  # fmt: skip
    np.testing.assert_array_equal(got, want.numpy())


def test_sampling_draws_only_allowed_tokens_repeatably():
    """Each sampled token lies in the top-k / top-p set of the model's own distribution at that step (from
    transformers' forward pass over the sequence), one seed gives one sequence, and top_k=1 is greedy."""
    ours, config = LONG_MODELS["gpt2"]
    hf, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, config)
    graphs = decoder_graphs(ours(config.to_dict()), max_positions=64).bind(weights)
    run = _compiled(graphs)
    prompt, _ = token_batch(40, 3, 4, seed=9)
    options = {"temperature": 1.5, "top_k": 8, "top_p": 0.8}
    tokens = sample_generate(graphs, prompt, 12, seed=1, run=run, **options)
    assert (tokens == sample_generate(graphs, prompt, 12, seed=1, run=run, **options)).all()
    with torch.no_grad():
        logits = hf(torch.from_numpy(tokens)).logits.numpy()
    for k in range(12):
        at = prompt.shape[1] - 1 + k  # the logits that chose token at + 1
        allowed = allowed_probabilities(logits[:, at], **options) > 0
        assert allowed[np.arange(3), tokens[:, at + 1]].all(), f"step {k}"
        assert (allowed.sum(-1) <= 8).all()
    greedy = greedy_generate(graphs, prompt, 6, run=run)
    np.testing.assert_array_equal(sample_generate(graphs, prompt, 6, top_k=1, seed=2, run=run), greedy)
    with pytest.raises(ValueError, match="temperature"):
        sample_generate(graphs, prompt, 1, temperature=0.0)
