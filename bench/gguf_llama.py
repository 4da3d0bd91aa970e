"""bench/llm.py's random-weight Llama written as a GGUF file, so that llama.cpp runs the same weights.

llama.cpp's LLAMA architecture rotates adjacent pairs of a head's dimensions (2i, 2i + 1) where transformers'
Llama rotates dimension i with i + head_dim / 2, so the query and key projections' rows are reordered per head
(new row 2i is old row i, new row 2i + 1 is old row i + head_dim / 2): the attention scores come out the same.
Names and metadata keys are llama.cpp's (the `gguf` package's constants). `q8_0` stores the projections and the
head in llama.cpp's Q8_0 (blocks of 32 int8 values with a float16 scale), the embedding and norms in float32.
The vocabulary is bench/llm.py's word-level one ("t0" .. "t{vocab-1}"), written as a plain token list: the bench
feeds token ids, so llama.cpp never tokenizes text.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

EOS = 1  # bench/llm.py's tokenizer_config: eos_token "t1"


def _pairs_adjacent(w: np.ndarray, heads: int) -> np.ndarray:
    """Rows of a [heads * head_dim, hidden] projection reordered per head from halves to adjacent pairs."""
    dim = w.shape[0] // heads
    return w.reshape(heads, 2, dim // 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)


def _tensors(model) -> dict[str, np.ndarray]:
    """llama.cpp's tensor names over the transformers model's float32 weights."""
    cfg, sd = model.config, {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out = {
        "token_embd.weight": sd["model.embed_tokens.weight"],
        "output_norm.weight": sd["model.norm.weight"],
        "output.weight": sd["lm_head.weight"],
    }
    names = {
        "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
        "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    }  # fmt: skip
    for i in range(cfg.num_hidden_layers):
        for ours, theirs in names.items():
            w = sd[f"model.layers.{i}.{theirs}.weight"]
            if ours == "attn_q":
                w = _pairs_adjacent(w, cfg.num_attention_heads)
            elif ours == "attn_k":
                w = _pairs_adjacent(w, cfg.num_key_value_heads)
            out[f"blk.{i}.{ours}.weight"] = w
    return out


def write_gguf(model, path: Path, q8_0: bool = False) -> Path:
    """`model` (a transformers LlamaForCausalLM) as a GGUF file at `path`."""
    cfg = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_rope_freq_base(float((getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if q8_0 else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"t{i}" for i in range(cfg.vocab_size)])
    w.add_token_scores([0.0] * cfg.vocab_size)
    w.add_token_types([gguf.TokenType.NORMAL] * cfg.vocab_size)
    w.add_bos_token_id(0)
    w.add_eos_token_id(EOS)
    w.add_add_bos_token(False)
    for name, value in _tensors(model).items():
        value = np.ascontiguousarray(value, np.float32)
        if q8_0 and value.ndim == 2 and name != "token_embd.weight":
            quantized = gguf.quants.quantize(value, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, quantized, raw_shape=quantized.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
