"""Tiny Llama configs of each rope scaling type, and a tiny Phi-3 with longrope, shared by the model,
paged-decoding and generation tests."""

import copy

import transformers

TINY = dict(vocab_size=40, hidden_size=24, intermediate_size=36, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=32)  # fmt: skip
# Rope scaling, each from an original context of 8 positions (dynamic's max_position_embeddings) under a 20-token
# prompt; head_dim 16 gives 8 frequencies, so llama3's three bands and yarn's ramp each hold some, and longrope's
# lists 8 factors each.
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
    "longrope": dict(head_dim=16, rope_parameters=dict(rope_type="longrope", rope_theta=100.0,
                     original_max_position_embeddings=8, short_factor=[1.0, 1.2, 1.5, 1.7, 2.0, 2.5, 3.1, 3.3],
                     long_factor=[1.1, 1.9, 2.6, 4.0, 7.3, 9.9, 15.0, 31.0])),
}  # fmt: skip


def scaled_llama(case: str, **extra) -> transformers.LlamaConfig:
    return transformers.LlamaConfig(**{**TINY, **SCALED[case], **extra})


# Phi-3 with longrope from an original context of 8 (read from the top level, as Phi3Config does) under a 20-token
# prompt, rotating 12 of each head's 16 features (partial_rotary_factor 0.75, as Phi-4-mini): 6 frequencies, each
# divided by its own factor, from lists that are not float32-round numbers.
PHI3 = dict(vocab_size=40, hidden_size=64, intermediate_size=36, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=32, original_max_position_embeddings=8, bos_token_id=0,
            eos_token_id=1, pad_token_id=0, partial_rotary_factor=0.75,
            rope_parameters=dict(rope_type="longrope", rope_theta=100.0, short_factor=[1.0, 1.07, 1.3, 1.9, 2.71, 3.3],
                                 long_factor=[1.01, 1.7, 3.14, 9.5, 21.3, 47.9]))  # fmt: skip


def phi3_longrope(**extra) -> transformers.Phi3Config:
    """Phi3Config fills its rope dict in place: it gets a copy, so PHI3 stays as written."""
    return transformers.Phi3Config(**copy.deepcopy({**PHI3, **extra}))
