"""bench/memory_bandwidth.py: the weight bytes a one-row decode step reads, counted from a tiny Llama's checkpoint
names (every projection and the head in the weight format, norms in float32, one embedding row), and a read
bandwidth that is a rate."""

import sys
from pathlib import Path

import pytest
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from memory_bandwidth import BYTES_PER_VALUE, read_bandwidth, weight_bytes_per_token  # noqa: E402


@pytest.mark.parametrize("fmt", sorted(BYTES_PER_VALUE))
def test_weight_bytes_count_projections_in_the_format_and_one_embedding_row(fmt):
    config = transformers.LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=False,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    want = 0.0
    for name, value in model.state_dict().items():
        if name.endswith("proj.weight") or name == "lm_head.weight":
            want += value.numel() * BYTES_PER_VALUE[fmt]
        elif name == "model.embed_tokens.weight":
            want += value.shape[1] * 4
        else:  # the norms
            want += value.numel() * 4
    assert weight_bytes_per_token(model, fmt) == pytest.approx(want)


def test_read_bandwidth_is_a_rate_on_torchs_threads():
    median, best, threads = read_bandwidth(megabytes=16, repeats=3)
    assert 0 < median <= best
    assert threads == torch.get_num_threads()
