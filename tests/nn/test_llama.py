"""Llama-family decoders from Hugging Face configs against transformers' models with the same random weights:
Llama (GQA, rope theta, attention biases), Qwen2 (q/k/v biases, tied embeddings), Mistral (sliding window)."""

import pytest
import torch
import transformers

import luminal as lm
from luminal.nn.models.llama import LlamaConfig, LlamaForCausalLM
from tests.nn.hf import max_error, tiny_model, token_batch

BASE = dict(vocab_size=40, hidden_size=24, intermediate_size=36, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=32)  # fmt: skip
CASES = {
    "llama": (transformers.LlamaConfig, dict(rope_theta=500.0, rms_norm_eps=1e-5, attention_bias=True)),
    "llama-mha-head-dim": (transformers.LlamaConfig, dict(num_key_value_heads=4, head_dim=8)),
    "qwen2-tied": (transformers.Qwen2Config, dict(num_key_value_heads=1, tie_word_embeddings=True, rope_theta=1e6)),
    "mistral-window": (transformers.MistralConfig, dict(sliding_window=3)),
}


def _run(config, ids, mask):
    g = lm.Graph()
    shape = (lm.sym("batch"), lm.sym("seq", max=32))
    inputs = g.input("input_ids", shape, lm.int64), g.input("attention_mask", shape, lm.int64)
    logits, _ = LlamaForCausalLM(config)(*inputs)
    logits.output("logits")
    return g, {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize("case", CASES)
def test_logits_match_hugging_face(case):
    config_cls, extra = CASES[case]
    hf_config = config_cls(**{**BASE, **extra})
    hf, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, hf_config)
    ids, mask = token_batch(40, 2, 7, pad_tail=2)
    g, feed = _run(hf_config.to_dict(), ids, mask)
    g.bind(weights)
    assert not g.unbound_weights()
    with torch.no_grad():
        want = hf(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    assert max_error(lm.run(g, feed)["logits"], want) < 1e-4


def test_config_reading():
    qwen = LlamaConfig.from_hf(transformers.Qwen2Config(**BASE, tie_word_embeddings=True).to_dict())
    assert (qwen.qkv_bias, qwen.out_bias, qwen.tie_word_embeddings, qwen.kv_heads) == (True, False, True, 2)
    mistral = LlamaConfig.from_hf(transformers.MistralConfig(**BASE, sliding_window=5).to_dict())
    assert mistral.windows == (5, 5)
    old_style = LlamaConfig.from_hf({**BASE, "model_type": "llama", "rope_theta": 123.0, "rope_scaling": None})
    assert old_style.rope_theta == 123.0 and old_style.head_size == 6
    with pytest.raises(NotImplementedError, match="rope type"):
        LlamaConfig.from_hf({**BASE, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    names = set(LlamaForCausalLM(qwen).parameter_shapes())
    assert "lm_head.weight" not in names and "model.layers.1.self_attn.q_proj.bias" in names
    assert "model.layers.1.self_attn.o_proj.bias" not in names
