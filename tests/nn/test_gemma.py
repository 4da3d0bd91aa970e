"""Gemma 2 and Gemma 3 (text) from Hugging Face configs against transformers' models with the same random weights:
grouped-query attention with head_dim apart from hidden / heads, query_pre_attn_scalar apart from head_dim,
sliding windows shorter than the prompt, soft-capping that changes the logits, Gemma 3's q/k norms and its two
ropes (linear scaling on the global layers); int8 projections; configs that cannot be served refused by field."""

import numpy as np
import pytest
import torch
import transformers

import luminal as lm
from luminal.nn.models.gemma import GemmaForCausalLM
from luminal.nn.models.gemma_config import GemmaConfig
from luminal.nn.quantized import quantize_checkpoint
from tests.nn.hf import max_error, tiny_model, token_batch

BASE = dict(vocab_size=40, hidden_size=24, intermediate_size=36, num_attention_heads=4, num_key_value_heads=2,
            head_dim=8, query_pre_attn_scalar=10, sliding_window=3, max_position_embeddings=32)  # fmt: skip
GEMMA3_ROPES = {
    "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 50.0},
}
CASES = {
    # Layers sliding, full; an untied head; both caps within the range of the scores and logits they cap.
    "gemma2": lambda **kw: transformers.Gemma2Config(**{**BASE, **dict(num_hidden_layers=2, rope_theta=100.0,
        attn_logit_softcapping=2.0, final_logit_softcapping=10.0, tie_word_embeddings=False), **kw}),
    # Layers sliding, full, sliding (every 2nd full); tied; biased projections.
    "gemma3": lambda **kw: transformers.Gemma3TextConfig(**{**BASE, **dict(num_hidden_layers=3,
        sliding_window_pattern=2, rope_parameters=GEMMA3_ROPES, final_logit_softcapping=10.0, attention_bias=True),
        **kw}),
}  # fmt: skip
SEQ = 9  # three windows long


def _graph(model) -> lm.Graph:
    g = lm.Graph()
    shape = (lm.sym("batch"), lm.sym("seq", max=32))
    model(*(g.input(n, shape, lm.int64) for n in ("input_ids", "attention_mask")))[0].output("logits")
    return g


def _hf_logits(hf, ids, mask) -> np.ndarray:
    with torch.no_grad():
        return hf(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()


@pytest.mark.parametrize("case", CASES)
def test_logits_match_hugging_face(case):
    config = CASES[case]()
    hf, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, config)
    ids, mask = token_batch(40, 2, SEQ, pad_tail=2)
    g = _graph(GemmaForCausalLM(config.to_dict())).bind(weights)
    assert not g.unbound_weights()
    assert max_error(lm.run(g, {"input_ids": ids, "attention_mask": mask})["logits"], _hf_logits(hf, ids, mask)) < 1e-4


@pytest.mark.parametrize(
    "case, changed",
    [
        ("gemma2", dict(attn_logit_softcapping=None)),
        ("gemma2", dict(final_logit_softcapping=None)),
        ("gemma2", dict(query_pre_attn_scalar=8)),
        ("gemma2", dict(sliding_window=32)),
        ("gemma3", dict(rope_parameters={**GEMMA3_ROPES, "full_attention": {"rope_theta": 1000.0}})),
        ("gemma3", dict(rope_parameters={**GEMMA3_ROPES, "sliding_attention": {"rope_theta": 1000.0}})),
    ],
)
def test_each_gemma_feature_changes_the_logits_of_these_cases(case, changed):
    """The cases above exercise what they claim: without each feature, transformers' logits differ."""
    ids, mask = token_batch(40, 2, SEQ, pad_tail=2)
    want = _hf_logits(tiny_model(transformers.AutoModelForCausalLM.from_config, CASES[case]())[0], ids, mask)
    other = _hf_logits(tiny_model(transformers.AutoModelForCausalLM.from_config, CASES[case](**changed))[0], ids, mask)
    assert max_error(other, want) > 1e-2


@pytest.mark.parametrize("case", CASES)
def test_int8_projections_stay_close_to_hugging_face(case):
    """Q8_0 projections (hidden 32: a whole block), float norms and embeddings: within 3% of the largest logit,
    the bound tests/quantize states for Llama."""
    config = CASES[case](hidden_size=32)
    hf, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, config)
    model = GemmaForCausalLM(config.to_dict(), quantize="int8")
    g = _graph(model)
    int8 = {n for n, i in g.weights.items() if g.nodes[i].dtype == lm.int8}
    assert "model.layers.0.self_attn.q_proj.weight" in int8 and not any("norm" in n or "embed" in n for n in int8)
    g.bind(quantize_checkpoint(model, weights))
    ids, mask = token_batch(40, 2, SEQ, pad_tail=2)
    want = _hf_logits(hf, ids, mask)
    assert max_error(lm.run(g, {"input_ids": ids, "attention_mask": mask})["logits"], want) < 0.03 * np.abs(want).max()


def test_config_reading():
    gemma2 = GemmaConfig.from_hf(CASES["gemma2"]().to_dict())
    assert gemma2.windows == (3, None) and gemma2.attn_logit_softcapping == 2.0 and not gemma2.tie_word_embeddings
    assert gemma2.global_rope == gemma2.local_rope and gemma2.global_rope.theta == 100.0
    gemma3 = GemmaConfig.from_hf(CASES["gemma3"]().to_dict())
    assert gemma3.windows == (3, None, 3) and gemma3.attn_logit_softcapping is None and gemma3.tie_word_embeddings
    assert (gemma3.local_rope.theta, gemma3.global_rope.theta, gemma3.global_rope.scaling.factor) == (50, 1000, 2)
    names = set(GemmaForCausalLM(gemma3).parameter_shapes())
    assert "lm_head.weight" not in names and "model.layers.2.self_attn.k_norm.weight" in names
    assert "model.layers.0.post_feedforward_layernorm.weight" in names
    # transformers 4's spelling: rope_theta and rope_scaling for the global layers, rope_local_base_freq for the
    # sliding ones, sliding_window_pattern instead of layer_types.
    old = {**CASES["gemma3"]().to_dict(), "rope_parameters": None, "layer_types": None, "sliding_window_pattern": 2}
    old.update(rope_theta=1e3, rope_local_base_freq=50.0, rope_scaling={"type": "linear", "factor": 2.0})
    assert GemmaConfig.from_hf(old) == gemma3
    # Left out, Gemma 2's caps take transformers' defaults; null turns them off.
    bare = {k: v for k, v in CASES["gemma2"]().to_dict().items() if "softcapping" not in k}
    defaults = GemmaConfig.from_hf(bare)
    assert (defaults.attn_logit_softcapping, defaults.final_logit_softcapping) == (50.0, 30.0)


UNBUILT_ROPE = {"full_attention": {"rope_type": "proportional", "factor": 2.0}}


@pytest.mark.parametrize(
    "case, field, value, error",
    [
        ("gemma2", "use_bidirectional_attention", True, NotImplementedError),
        ("gemma3", "use_bidirectional_attention", True, NotImplementedError),
        ("gemma3", "attn_logit_softcapping", 50.0, NotImplementedError),
        ("gemma2", "layer_types", ["sliding_attention", "chunked_attention"], ValueError),
        ("gemma2", "layer_types", ["full_attention"], ValueError),
        ("gemma3", "sliding_window", None, ValueError),
        ("gemma3", "rope_parameters", {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}, ValueError),
        ("gemma3", "rope_parameters", UNBUILT_ROPE, NotImplementedError),
        ("gemma2", "hidden_activation", "gelu_foo", ValueError),
    ],
)
def test_unservable_configs_are_refused_by_name(case, field, value, error):
    raw = {**CASES[case]().to_dict(), field: value}
    with pytest.raises(error, match="rope_type 'proportional'" if value is UNBUILT_ROPE else field):
        GemmaForCausalLM(raw)
