"""Llama-family decoders from Hugging Face configs against transformers' models with the same random weights:
Llama (GQA, rope theta, attention biases), Qwen2 (q/k/v biases, tied embeddings), Mistral (sliding window),
Qwen3 (per-head q/k norms, head_dim apart from hidden / heads, biases and sliding layers; float and int8), and
the rope scaling types on prompts longer than the context they stretch from."""

import pytest
import torch
import transformers

import luminal as lm
from luminal.nn.models.generation import positions_of
from luminal.nn.models.llama import LlamaConfig, LlamaForCausalLM
from luminal.nn.quantized import quantize_checkpoint
from tests.nn.hf import max_error, tiny_model, token_batch
from tests.nn.rope_cases import SCALED, scaled_llama

BASE = dict(vocab_size=40, hidden_size=24, intermediate_size=36, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=32)  # fmt: skip
CASES = {
    "llama": (transformers.LlamaConfig, dict(rope_theta=500.0, rms_norm_eps=1e-5, attention_bias=True)),
    "llama-mha-head-dim": (transformers.LlamaConfig, dict(num_key_value_heads=4, head_dim=8)),
    "qwen2-tied": (transformers.Qwen2Config, dict(num_key_value_heads=1, tie_word_embeddings=True, rope_theta=1e6)),
    "mistral-window": (transformers.MistralConfig, dict(sliding_window=3)),
    "qwen3-head-dim-tied": (transformers.Qwen3Config, dict(head_dim=8, tie_word_embeddings=True)),
    "qwen3-bias-window": (transformers.Qwen3Config, dict(head_dim=6, attention_bias=True, use_sliding_window=True,
                          sliding_window=3, max_window_layers=1)),
}  # fmt: skip


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


@pytest.mark.parametrize("seq", [20, 6], ids=["past-the-context", "within-it"])
@pytest.mark.parametrize("case", SCALED)
def test_scaled_rope_logits_match_hugging_face(case, seq):
    hf_config = scaled_llama(case)
    hf, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, hf_config)
    ids, mask = token_batch(40, 2, seq, pad_tail=2)
    g, feed = _run(hf_config.to_dict(), ids, mask)
    g.bind(weights)
    with torch.no_grad():
        want = hf(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
        plain = scaled_llama(case, rope_parameters=None)
        unscaled = tiny_model(transformers.AutoModelForCausalLM.from_config, plain)[0](torch.from_numpy(ids)).logits
    assert max_error(lm.run(g, feed)["logits"], want) < 1e-4
    if case != "dynamic" or seq > 8:  # the scaling changes the logits (dynamic's only past its context)
        assert max_error(unscaled.numpy(), want) > 1e-2


def test_dynamic_rope_stretches_each_row_by_its_own_length():
    """Left-padded rows of 20 and 12 tokens over a context of 8: each row's logits are those transformers gives it
    alone (a fresh model: its inv_freq is stateful), not the batch's, whose base grows with the longest row."""
    config = scaled_llama("dynamic")
    ids, mask = token_batch(40, 2, 20, seed=1)
    mask[1, :8], ids[1, :8] = 0, 0
    g = lm.Graph()
    shape = (lm.sym("batch"), lm.sym("seq", max=32))
    inputs = [g.input(name, shape, lm.int64) for name in ("input_ids", "attention_mask", "position_ids")]
    LlamaForCausalLM(config.to_dict())(inputs[0], inputs[1], None, inputs[2])[0].output("logits")
    got = lm.run(g.bind(tiny_model(transformers.AutoModelForCausalLM.from_config, config)[1]),
                 {"input_ids": ids, "attention_mask": mask, "position_ids": positions_of(mask)})["logits"]  # fmt: skip
    with torch.no_grad():
        for row, start in ((0, 0), (1, 8)):
            hf = tiny_model(transformers.AutoModelForCausalLM.from_config, config)[0]
            alone = hf(torch.from_numpy(ids[row : row + 1, start:])).logits[0].numpy()
            assert max_error(got[row, start:], alone) < 1e-4, row


def test_scaled_rope_cases_reach_every_band():
    """The cases above exercise llama3's three bands and a yarn ramp across several frequencies."""
    llama3 = LlamaConfig.from_hf(scaled_llama("llama3-tied").to_dict())
    assert 0 < llama3.rope.llama3_bands(16, 1e4)[0] < llama3.rope.llama3_bands(16, 1e4)[1] < 8
    yarn = LlamaConfig.from_hf(scaled_llama("yarn").to_dict())
    low, high = yarn.rope.yarn_ramp(16, 100.0)
    assert low <= 1 and high - low >= 3 and yarn.rope.attention_factor > 1


def test_rope_scaling_reads_both_spellings():
    """transformers 4's rope_scaling (with "type" and a top-level rope_theta) reads as 5's rope_parameters."""
    for case in ("llama3-tied", "linear", "dynamic", "yarn"):
        new = scaled_llama(case).to_dict()
        rope = dict(new["rope_parameters"])
        old = {**new, "rope_parameters": None, "rope_theta": rope.pop("rope_theta"), "rope_scaling": rope}
        rope["type"] = rope.pop("rope_type")
        assert (
            LlamaConfig.from_hf(old) == LlamaConfig.from_hf(new)
            and LlamaConfig.from_hf(new).rope.rope_type != "default"
        )
    null_factor = {**BASE, "rope_scaling": {"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 8}}
    assert LlamaConfig.from_hf(null_factor).rope.factor == 4.0  # transformers: max_position_embeddings / original


@pytest.mark.parametrize(
    "rope, error, field",
    [
        ({"rope_type": "longrope", "short_factor": [1.0] * 3}, ValueError, "'long_factor'"),
        ({"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0}, ValueError, "'factor'.*None"),
        ({"rope_type": "linear", "factor": "4"}, ValueError, "'factor'.*'4'"),
        ({"type": "dynamic"}, ValueError, "'factor'"),
        ({"rope_type": "yarn", "original_max_position_embeddings": 8}, ValueError, "'factor'"),
        ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0}, ValueError,
         "low_freq_factor 4.0"),
        ({"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}, ValueError, "partial_rotary_factor"),
    ],
)  # fmt: skip
def test_unservable_rope_configs_are_refused_by_name(rope, error, field):
    with pytest.raises(error, match=field):
        LlamaConfig.from_hf({**BASE, "rope_scaling": rope})


def test_config_reading():
    qwen = LlamaConfig.from_hf(transformers.Qwen2Config(**BASE, tie_word_embeddings=True).to_dict())
    assert (qwen.qkv_bias, qwen.out_bias, qwen.tie_word_embeddings, qwen.kv_heads) == (True, False, True, 2)
    mistral = LlamaConfig.from_hf(transformers.MistralConfig(**BASE, sliding_window=5).to_dict())
    assert mistral.windows == (5, 5)
    old_style = LlamaConfig.from_hf({**BASE, "model_type": "llama", "rope_theta": 123.0, "rope_scaling": None})
    assert old_style.rope_theta == 123.0 and old_style.head_size == 6
    with pytest.raises(NotImplementedError, match="rope_type"):
        LlamaConfig.from_hf({**BASE, "rope_scaling": {"rope_type": "su", "factor": 4.0}})
    names = set(LlamaForCausalLM(qwen).parameter_shapes())
    assert "lm_head.weight" not in names and "model.layers.1.self_attn.q_proj.bias" in names
    assert "model.layers.1.self_attn.o_proj.bias" not in names


def test_qwen3_config_reading():
    qwen3 = LlamaConfig.from_hf(transformers.Qwen3Config(**BASE, attention_bias=True).to_dict())
    assert (qwen3.qk_norm, qwen3.qkv_bias, qwen3.out_bias, qwen3.head_size) == (True, True, True, 128)
    assert qwen3.windows == (None, None)  # Qwen3Config's sliding_window is ignored without use_sliding_window
    raw = {**BASE, "model_type": "qwen3", "sliding_window": 4, "use_sliding_window": True}
    assert LlamaConfig.from_hf(raw).head_size == 128  # no head_dim in config.json: Qwen3Config's default
    assert LlamaConfig.from_hf(raw).windows == (None, None)  # max_window_layers defaults to 28
    assert LlamaConfig.from_hf({**raw, "layer_types": ["full_attention", "sliding_attention"]}).windows == (None, 4)
    assert not LlamaConfig.from_hf({**BASE, "model_type": "qwen2"}).qk_norm
    names = set(LlamaForCausalLM(qwen3).parameter_shapes())
    assert {"model.layers.1.self_attn.q_norm.weight", "model.layers.1.self_attn.k_norm.weight"} <= names


def test_qwen3_int8_quantises_the_projections_and_keeps_the_norms_float():
    hf_config = transformers.Qwen3Config(**{**BASE, "hidden_size": 32, "head_dim": 16})  # widths multiples of 32
    hf, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, hf_config)
    ids, mask = token_batch(40, 2, 7)
    g = lm.Graph()
    inputs = g.input("input_ids", ids.shape, lm.int64), g.input("attention_mask", ids.shape, lm.int64)
    model = LlamaForCausalLM(hf_config.to_dict(), quantize="int8")
    model(*inputs)[0].output("logits")
    g.bind(quantize_checkpoint(model, weights))
    dtypes = {name: g.nodes[i].dtype for name, i in g.weights.items()}
    assert dtypes["model.layers.0.self_attn.q_proj.weight"] == lm.int8
    assert dtypes["model.layers.0.self_attn.q_norm.weight"] == dtypes["model.layers.0.self_attn.k_norm.weight"]
    assert dtypes["model.layers.0.self_attn.k_norm.weight"] == lm.float32
    with torch.no_grad():
        want = hf(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    # Q8_0 rounds each weight by at most half its block's scale: a few percent of the largest logit, as the
    # float-against-int8 models test states (tests/quantize/test_quantized_models.py).
    assert max_error(lm.run(g, {"input_ids": ids, "attention_mask": mask})["logits"], want) < 0.03 * abs(want).max()
