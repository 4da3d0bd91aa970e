"""Tiny Llama configs of each rope scaling type, shared by the model, paged-decoding and generation tests."""

import transformers

TINY = dict(vocab_size=40, hidden_size=24, intermediate_size=36, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=32)  # fmt: skip
# Rope scaling, each from an original context of 8 positions (dynamic's max_position_embeddings) under a 20-token
# prompt; head_dim 16 gives 8 frequencies, so llama3's three bands and yarn's ramp each hold some.
SCALED = {
    "llama3-tied": dict(head_dim=16, tie_word_embeddings=True, rope_parameters=dict(rope_type="llama3", rope_theta=1e4,
                        factor=8.0, low_freq_factor=0.1, high_freq_factor=1.2, original_max_position_embeddings=8)),
    "linear": dict(rope_parameters=dict(rope_type="linear", rope_theta=100.0, factor=4.0)),
    "dynamic": dict(head_dim=16, max_position_embeddings=8, rope_parameters=dict(rope_type="dynamic", factor=3.0)),
    "yarn": dict(head_dim=16, rope_parameters=dict(rope_type="yarn", rope_theta=100.0, factor=4.0, beta_fast=2.0,
                 beta_slow=0.05, original_max_position_embeddings=8)),
    "yarn-untruncated-mscale": dict(head_dim=16, rope_parameters=dict(rope_type="yarn", rope_theta=100.0, factor=4.0,
                                    beta_fast=2.0, beta_slow=0.05, original_max_position_embeddings=8, truncate=False,
                                    mscale=1.0, mscale_all_dim=0.5)),
}  # fmt: skip


def scaled_llama(case: str, **extra) -> transformers.LlamaConfig:
    return transformers.LlamaConfig(**{**TINY, **SCALED[case], **extra})
