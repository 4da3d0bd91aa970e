"""Phi-3 (fused qkv_proj and gate_up_proj, partial rotary, longrope, a sliding window) from Hugging Face configs
against transformers' Phi3ForCausalLM with the same random weights; int8 on the fused projections; configs that
cannot be served refused by name."""

import numpy as np
import pytest
import torch
import transformers

import luminal as lm
from luminal.nn.models.llama import LlamaConfig, LlamaForCausalLM
from luminal.nn.quantized import quantize_checkpoint
from tests.nn.hf import max_error, tiny_model, token_batch
from tests.nn.rope_cases import PHI3, phi3_longrope

PLAIN = {k: v for k, v in PHI3.items() if k not in ("rope_parameters", "partial_rotary_factor")}
CASES = {
    "plain": PLAIN,
    "window": dict(PLAIN, sliding_window=3),
}


def _logits(config, ids, mask, quantize=None):
    """(our logits, transformers' eager logits) of one tiny random model."""
    hf, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, config)
    g = lm.Graph()
    shape = (lm.sym("batch"), lm.sym("seq", max=32))
    inputs = g.input("input_ids", shape, lm.int64), g.input("attention_mask", shape, lm.int64)
    model = LlamaForCausalLM(config.to_dict(), quantize=quantize)
    model(*inputs)[0].output("logits")
    g.bind(quantize_checkpoint(model, weights) if quantize else weights)
    assert not g.unbound_weights()
    with torch.no_grad():
        want = hf(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    return lm.run(g, {"input_ids": ids, "attention_mask": mask})["logits"], want


@pytest.mark.parametrize("case", CASES)
def test_logits_match_hugging_face(case):
    ids, mask = token_batch(40, 2, 7, pad_tail=2)
    got, want = _logits(transformers.Phi3Config(**CASES[case]), ids, mask)
    assert max_error(got, want) < 1e-4


@pytest.mark.parametrize("seq", [20, 6], ids=["past-the-original-context", "within-it"])
def test_longrope_with_partial_rotary_matches_hugging_face(seq):
    """Long factors past the original context of 8, short ones within it; 12 of 16 features rotated."""
    config = phi3_longrope()
    ids, mask = token_batch(40, 2, seq, pad_tail=2)
    got, want = _logits(config, ids, mask)
    assert max_error(got, want) < 1e-4
    other = "short_factor" if seq > 8 else "long_factor"  # the list that must not have been used
    swapped = dict(PHI3["rope_parameters"], **{other: [1.0] * 6})
    assert max_error(_logits(phi3_longrope(rope_parameters=swapped), ids, mask)[1], want) < 1e-6


def test_fused_projections_quantise_to_int8():
    ids, mask = token_batch(40, 2, 7)
    got, want = _logits(phi3_longrope(), ids, mask, quantize="int8")
    # Q8_0 rounds each weight by at most half its block's scale (tests/quantize/test_quantized_models.py).
    assert max_error(got, want) < 0.03 * abs(want).max()


def test_config_reading():
    cfg = LlamaConfig.from_hf(phi3_longrope(sliding_window=5).to_dict())
    assert (cfg.fused_projections, cfg.rotary_size, cfg.windows, cfg.rms_norm_eps) == (True, 12, (5, 5), 1e-5)
    assert cfg.rope.rope_type == "longrope" and cfg.rope.original_max_positions == 8
    assert cfg.rope.attention_factor == pytest.approx(np.sqrt(1 + np.log(32 / 8) / np.log(8)))
    old = {**PLAIN, "model_type": "phi3", "rope_theta": 100.0, "partial_rotary_factor": 0.75,
           "rope_scaling": {"type": "su", "short_factor": [1.0] * 6, "long_factor": [2.0] * 6}}  # fmt: skip
    old_cfg = LlamaConfig.from_hf(old)  # transformers 4 spelling, Phi-3's older type name
    assert old_cfg.rope.rope_type == "longrope" and old_cfg.rotary_size == 12 and old_cfg.rope.long_factor == (2.0,) * 6
    assert LlamaConfig.from_hf({"model_type": "phi3"}).rope.original_max_positions == 0  # default rope: unused
    names = set(LlamaForCausalLM(cfg).parameter_shapes())
    assert {"model.layers.0.self_attn.qkv_proj.weight", "model.layers.0.mlp.gate_up_proj.weight"} <= names
    assert not any("q_proj" in n or "gate_proj" in n or n.endswith(".bias") for n in names)


@pytest.mark.parametrize(
    "change, error, field",
    [
        (dict(rope_parameters=dict(rope_type="linear", factor=2.0)), NotImplementedError, "rope_type 'linear'"),
        (dict(rope_parameters=dict(rope_type="longrope", short_factor=[1.0] * 6)), ValueError, "'long_factor'"),
        (dict(rope_parameters=dict(rope_type="longrope", short_factor=[1.0] * 5, long_factor=[1.0] * 6)), ValueError,
         "short_factor holds 5"),
        (dict(rope_parameters=dict(rope_type="longrope", short_factor=[1.0] * 6, long_factor=[1.0] * 5 + [0.0])),
         ValueError, "'long_factor'.*0.0"),
        (dict(partial_rotary_factor=1.5), ValueError, "partial_rotary_factor"),
    ],
)  # fmt: skip
def test_unservable_configs_are_refused_by_name(change, error, field):
    raw = {**PHI3, "model_type": "phi3", "partial_rotary_factor": 0.75, **change}
    with pytest.raises(error, match=field):
        LlamaForCausalLM(raw)
