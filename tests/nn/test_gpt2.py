"""GPT-2 from a Hugging Face config against transformers' GPT2LMHeadModel with the same random weights."""

import numpy as np
import pytest
import torch
import transformers

import luminal as lm
from luminal.nn.models.gpt2 import GPT2LMHeadModel
from tests.nn.hf import max_error, tiny_model, token_batch

CONFIG = dict(vocab_size=48, n_positions=16, n_embd=24, n_layer=2, n_head=3, n_inner=40)


def _logits_graph(config, batch, seq, with_mask):
    g = lm.Graph()
    ids = g.input("input_ids", (batch, seq), lm.int64)
    mask = g.input("attention_mask", (batch, seq), lm.int64) if with_mask else None
    logits, _ = GPT2LMHeadModel(config)(ids, mask)
    logits.output("logits")
    return g


@pytest.mark.parametrize("extra", [{}, {"scale_attn_by_inverse_layer_idx": True, "activation_function": "relu"}])
def test_gpt2_logits_match_hugging_face(extra):
    config = {**CONFIG, **extra}
    hf, weights = tiny_model(transformers.GPT2LMHeadModel, transformers.GPT2Config(**config))
    ids, mask = token_batch(48, 2, 6, pad_tail=2)  # right padding: the mask hides the last two keys of row 2
    g = _logits_graph(config, lm.sym("batch"), lm.sym("seq", max=16), with_mask=True)
    g.bind(weights)
    assert not g.unbound_weights()
    got = lm.run(g, {"input_ids": ids, "attention_mask": mask})["logits"]
    with torch.no_grad():
        want = hf(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    assert max_error(got, want) < 1e-4


def test_gpt2_weight_names_are_the_checkpoint_names():
    hf, weights = tiny_model(transformers.GPT2LMHeadModel, transformers.GPT2Config(**CONFIG))
    ours = GPT2LMHeadModel(CONFIG).parameter_shapes()
    # the checkpoint also holds lm_head.weight, the tied copy of transformer.wte.weight, which is not read
    assert set(ours) == set(weights) - {"lm_head.weight"}
    assert all(ours[k][0] == weights[k].shape for k in ours)
    np.testing.assert_array_equal(weights["lm_head.weight"], weights["transformer.wte.weight"])
