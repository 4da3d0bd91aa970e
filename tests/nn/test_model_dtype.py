"""Models built in bfloat16 (config dtype=, as torch's model.to(torch.bfloat16)): every parameter, the caches
and the outputs are bfloat16, and they compute what the float32 model computes within bfloat16's rounding."""

import ml_dtypes
import numpy as np

import luminal as lm
from luminal.nn.models.bert import BertConfig, bert_graph
from luminal.nn.models.generation import decoder_graphs
from luminal.nn.models.llama import LlamaConfig, LlamaForCausalLM

LLAMA = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
BERT = dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def bf16_weights(g: lm.Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = {name: tuple(int(d) for d in g.nodes[node].shape) for name, node in g.weights.items()}
    return {name: (rng.standard_normal(s) * 0.2).astype(ml_dtypes.bfloat16) for name, s in shapes.items()}


def widened(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: w.astype(np.float32) for name, w in weights.items()}


def test_llama_step_in_bfloat16_matches_float32():
    half = decoder_graphs(LlamaForCausalLM(LlamaConfig(**LLAMA, num_key_value_heads=2, dtype=lm.bfloat16)), 1, 16)
    full = decoder_graphs(LlamaForCausalLM(LlamaConfig(**LLAMA, num_key_value_heads=2)), 1, 16)
    assert {half.step.nodes[n].dtype for n in half.step.weights.values()} == {lm.bfloat16}
    weights = bf16_weights(half.step)
    half.step.bind(weights)
    full.step.bind(widened(weights))
    rng = np.random.default_rng(1)
    names = [f"past.{k}.{part}" for k in (0, 1) for part in ("key", "value")]
    past = {name: rng.standard_normal((1, 2, 5, 8)).astype(ml_dtypes.bfloat16) for name in names}
    ids = {"input_ids": np.array([[7]])}
    got, want = lm.run(half.step, ids | past), lm.run(full.step, ids | widened(past))
    assert got["logits"].dtype == ml_dtypes.bfloat16 and got["present.1.value"].shape == (1, 2, 6, 8)
    np.testing.assert_allclose(got["logits"].astype(np.float32), want["logits"], rtol=0.05, atol=0.05)


def test_bert_in_bfloat16_matches_float32():
    half, full = bert_graph(BertConfig(**BERT, dtype=lm.bfloat16), 2, 8), bert_graph(BertConfig(**BERT), 2, 8)
    weights = bf16_weights(half)
    half.bind(weights)
    full.bind(widened(weights))
    feed = {"input_ids": np.array([[1, 5, 9], [4, 2, 0]]), "attention_mask": np.array([[1, 1, 1], [1, 1, 0]])}
    feed["token_type_ids"] = np.zeros((2, 3), np.int64)
    got, want = lm.run(half, feed)["last_hidden_state"], lm.run(full, feed)["last_hidden_state"]
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=0.05, atol=0.05)


def test_from_hf_keeps_float32_whatever_the_checkpoint_dtype():
    raw = {"model_type": "llama", "torch_dtype": "bfloat16", "dtype": "bfloat16"}
    assert LlamaConfig.from_hf(raw).dtype == lm.float32
    assert BertConfig.from_hf({"dtype": "bfloat16"}).dtype == lm.float32
