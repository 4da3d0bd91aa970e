"""Tiny Hugging Face model folders for the LLM tests: random-weight Llama, GPT-2, sliding-window Mistral, Qwen2,
Gemma 2 and Gemma 3 (text), a Qwen3 (q/k norms, tied embeddings, a sliding layer), a Phi-3 (fused projections,
partial rotary, longrope, a window), and the mixtures of experts Mixtral and Qwen3-MoE (saved with each expert
apart, as published checkpoints are) built with transformers from a config, a byte-level BPE tokenizer trained here
with `tokenizers`, a chat template and a generation config, saved as
`save_pretrained` saves them. Nothing is downloaded."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

BOS, EOS = "<s>", "</s>"  # ids 0 and 1: the trainer puts special tokens first
VOCAB = 320
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, hello luminal; a compiler of few primitive ops",
    "language models answer questions one token at a time",
    "user: what is the capital of France? assistant: Paris is the capital.",
] * 8
# A ChatML-like template using what transformers passes: messages, bos_token, eos_token, add_generation_prompt.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] | trim }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)
LLAMA = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, rope_theta=100.0, max_position_embeddings=128, bos_token_id=0, eos_token_id=1,
)  # fmt: skip
GPT2 = dict(vocab_size=VOCAB, n_positions=128, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=1)
WINDOW = 5  # the windowed kinds' sliding window: shorter than the test prompts, so it decides what a query sees
# Gemma's head_dim and query_pre_attn_scalar set apart from hidden / heads; both kinds slide on layer 0 only.
GEMMA = dict(LLAMA, head_dim=16, query_pre_attn_scalar=12, sliding_window=WINDOW, final_logit_softcapping=20.0)
CONFIGS = {
    "llama": (transformers.LlamaConfig, LLAMA),
    "gpt2": (transformers.GPT2Config, GPT2),
    "mistral": (transformers.MistralConfig, dict(LLAMA, sliding_window=WINDOW)),  # a window on every layer
    # Layer 0 attends fully, layer 1 through the window.
    "qwen2": (
        transformers.Qwen2Config,
        dict(LLAMA, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1),
    ),
    # As Qwen2's, plus per-head q/k norms, a head_dim that is not hidden / heads, and the head tied to the embedding.
    "qwen3": (
        transformers.Qwen3Config,
        dict(
            LLAMA,
            head_dim=16,
            tie_word_embeddings=True,
            use_sliding_window=True,
            sliding_window=WINDOW,
            max_window_layers=1,
        ),
    ),
    "gemma2": (transformers.Gemma2Config, dict(GEMMA, attn_logit_softcapping=10.0)),
    # Given in transformers 4's words (rope_scaling: the global layer's; rope_local_base_freq: the sliding one's),
    # saved in 5's (rope_parameters per layer type).
    "gemma3": (
        transformers.Gemma3TextConfig,
        dict(
            GEMMA,
            sliding_window_pattern=2,
            rope_local_base_freq=50.0,
            rope_scaling={"rope_type": "linear", "factor": 2.0},
        ),
    ),
    # Fused qkv_proj / gate_up_proj, 12 of each head's 16 features rotated, a window on every layer, and longrope
    # from an original context of 4: shorter than a prefill chunk of 5, so every chunk and step of a longer prompt
    # divides by long_factor, as transformers' generate() does for the whole of it (rope_scaling.py says why a
    # chunk within the original context would not).
    "phi3": (
        transformers.Phi3Config,
        dict(
            LLAMA,
            hidden_size=64,
            partial_rotary_factor=0.75,
            sliding_window=WINDOW,
            original_max_position_embeddings=4,
            pad_token_id=0,
            rope_parameters=dict(
                rope_type="longrope",
                rope_theta=100.0,
                short_factor=[1.0, 1.1, 1.3, 1.6, 2.2, 2.9],
                long_factor=[1.05, 1.8, 3.3, 7.1, 13.0, 29.5],
            ),
        ),
    ),
    # Mixtures of experts: Mixtral's 4 experts, 2 per token, on every layer with the window on every layer;
    # Qwen3-MoE's q/k norms, a dense layer 0 and renormalised top-2 of 4 on layer 1, windowed throughout.
    "mixtral": (transformers.MixtralConfig, dict(LLAMA, num_local_experts=4, sliding_window=WINDOW)),
    # Mixtral with every matrix's input whole Q8_0 blocks (an expert's down_proj reads 64), so int8 packages
    # quantise its experts too.
    "mixtral_int8": (
        transformers.MixtralConfig,
        dict(LLAMA, intermediate_size=64, num_local_experts=4, sliding_window=WINDOW),
    ),
    "qwen3_moe": (
        transformers.Qwen3MoeConfig,
        dict(
            LLAMA,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=24,
            norm_topk_prob=True,
            mlp_only_layers=[0],
            use_sliding_window=True,
            sliding_window=WINDOW,
        ),
    ),
}


def train_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=[BOS, EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def hf_folder(folder: Path, kind: str = "llama", seed: int = 0, scale: float = 0.5) -> transformers.PreTrainedModel:
    """Write a tiny `kind` (a key of CONFIGS) model folder; returns the transformers model (eval mode).

    Weights are N(0, scale) rather than the 0.02 init, so the logits are far from ties and greedy decoding is
    the same in float32 whichever order the sums are taken in."""
    torch.manual_seed(seed)
    config_class, fields = CONFIGS[kind]
    config = config_class(**fields)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * scale)
    model.eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    train_tokenizer().save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": BOS, "eos_token": EOS, "chat_template": CHAT_TEMPLATE, "add_bos_token": False})
    )
    return model


def hf_tokenizer(folder: Path) -> transformers.PreTrainedTokenizerFast:
    return transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(folder / "tokenizer.json"), bos_token=BOS, eos_token=EOS, chat_template=CHAT_TEMPLATE
    )


def greedy_answer(hf: transformers.PreTrainedModel, prompt: list[int], new: int) -> list[int]:
    """The `new` tokens transformers' greedy generate() appends to `prompt` alone (no end-of-sequence stop)."""
    with torch.no_grad():
        ids = torch.tensor([prompt])
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False,
                          pad_token_id=0, eos_token_id=None)  # fmt: skip
    return out[0, len(prompt) :].tolist()
