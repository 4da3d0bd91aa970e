"""Helpers for the model tests: tiny random-weight Hugging Face models as the reference (conftest.py keeps
Hugging Face offline)."""

from __future__ import annotations

import numpy as np
import torch

from tests.nn.modcheck import randomize, state_dict_numpy


def tiny_model(model_cls, config, seed: int = 0) -> tuple[torch.nn.Module, dict[str, np.ndarray]]:
    """(the model in eval mode with every weight random, its state dict as numpy arrays).

    Weights are redrawn at N(0, 0.5) rather than Hugging Face's N(0, 0.02) init, so that every parameter
    visibly changes the output (LayerNorm weights of exactly 1 would hide a misapplied affine).
    """
    torch.manual_seed(seed)
    config._attn_implementation = "eager"  # the plain formula; sdpa agrees, but eager is the definition
    model = randomize(model_cls(config), seed)
    return model, state_dict_numpy(model)


def token_batch(vocab: int, batch: int, seq: int, seed: int = 0, pad_tail: int = 0):
    """(input_ids, attention_mask) int64 [batch, seq]; the last row has its final `pad_tail` tokens padded."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab, (batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), np.int64)
    if pad_tail:
        mask[-1, seq - pad_tail :] = 0
        ids[-1, seq - pad_tail :] = 0
    return ids, mask


def max_error(got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape, f"shape {got.shape}, Hugging Face gives {want.shape}"
    return float(np.abs(got.astype(np.float64) - want).max())
