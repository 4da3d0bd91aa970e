"""examples/hf_to_lgraph.py end to end: a Hugging Face folder written by save_pretrained becomes a .lgraph
file whose loaded graph reproduces transformers' logits; checkpoints saved one module level off still bind."""

import copy
import runpy
from pathlib import Path

import pytest
import torch
import transformers

import luminal as lm
from luminal.graph import GraphError
from tests.nn.hf import max_error, tiny_model, token_batch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hf_to_lgraph.py"
main = runpy.run_path(str(EXAMPLE))["main"]

LLAMA = transformers.Qwen2Config(vocab_size=40, hidden_size=24, intermediate_size=36, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
GPT2 = transformers.GPT2Config(vocab_size=40, n_positions=16, n_embd=24, n_layer=1, n_head=2)


def _compare(path, hf):
    g = lm.load(path)
    ids, mask = token_batch(40, 2, 6, seed=5)
    with torch.no_grad():
        want = hf(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    return max_error(lm.run(g, {"input_ids": ids, "attention_mask": mask})["logits"], want)


def test_causal_lm_folder_to_lgraph(tmp_path):
    hf, _ = tiny_model(transformers.AutoModelForCausalLM.from_config, LLAMA)
    hf.save_pretrained(tmp_path / "qwen")
    assert main([str(tmp_path / "qwen"), str(tmp_path / "qwen.lgraph"), "--max-seq", "32"]) == 0
    assert _compare(tmp_path / "qwen.lgraph", hf) < 1e-4
    # Causal and masked: the file lets a server pad requests of different lengths into one batch.
    padding = lm.load(tmp_path / "qwen.lgraph").padding
    assert set(padding) == {"input_ids", "attention_mask"} and padding["attention_mask"] == {1: 0}


def test_gpt2_base_checkpoint_binds_under_the_lm_head_names(tmp_path):
    """A GPT2Model checkpoint (wte.weight, h.0...) as the hub's gpt2 holds: the LM graph's
    transformer.* weights find their tensors one level up."""
    hf, _ = tiny_model(transformers.GPT2LMHeadModel, GPT2)
    hf.transformer.save_pretrained(tmp_path / "gpt2")
    assert main([str(tmp_path / "gpt2"), str(tmp_path / "gpt2.lgraph"), "--max-seq", "16"]) == 0
    assert _compare(tmp_path / "gpt2.lgraph", hf) < 1e-4


def test_missing_weights_are_named(tmp_path):
    hf, _ = tiny_model(transformers.GPT2LMHeadModel, GPT2)
    hf.transformer.save_pretrained(tmp_path / "gpt2")
    (tmp_path / "gpt2" / "config.json").write_text(
        (tmp_path / "gpt2" / "config.json").read_text().replace('"n_layer": 1', '"n_layer": 2')
    )
    with pytest.raises(GraphError, match=r"transformer\.h\.1\."):
        main([str(tmp_path / "gpt2"), str(tmp_path / "bad.lgraph")])


def test_bfloat16_checkpoint_is_widened_to_float32(tmp_path):
    hf, _ = tiny_model(transformers.AutoModelForCausalLM.from_config, LLAMA)
    rounded = copy.deepcopy(hf)  # float32 throughout (its rotary table too), given the rounded weights below
    hf.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    rounded.load_state_dict({k: v.float() for k, v in hf.state_dict().items()})
    assert main([str(tmp_path / "bf16"), str(tmp_path / "bf16.lgraph"), "--max-seq", "32"]) == 0
    assert _compare(tmp_path / "bf16.lgraph", rounded) < 1e-4
