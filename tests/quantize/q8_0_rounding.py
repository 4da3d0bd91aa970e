"""A transformers model with the weights an int8 (Q8_0) package quantises replaced by their Q8_0 rounding
(quantised, then dequantised): the float reference an int8 deployment must equal, since quantising those weights
again for the package gives back the same int8 values and scales."""

from __future__ import annotations

import torch

from luminal.quantize import BLOCK, dequantize_q8_0, quantize_q8_0


def _rounded(weight: torch.Tensor) -> torch.Tensor:
    q, scale = quantize_q8_0(weight.numpy())
    return torch.from_numpy(dequantize_q8_0(q, scale))


def round_to_q8_0(hf) -> int:
    """Round every projection whose input width is whole blocks, and every mixture's expert stacks whose matrices'
    input widths all are (transformers keeps them as `gate_up_proj` [experts, out, in] and `down_proj`), as
    luminal/nn/quantized.py quantises them; routers and embeddings stay. Returns how many weights were rounded."""
    rounded = 0
    with torch.no_grad():
        for _, m in hf.named_modules():
            if isinstance(m, torch.nn.Linear) and m.in_features % BLOCK == 0:
                m.weight.copy_(_rounded(m.weight))
                rounded += 1
            stacks = [getattr(m, name, None) for name in ("gate_up_proj", "down_proj")]
            if all(isinstance(s, torch.nn.Parameter) and s.ndim == 3 for s in stacks):
                if all(s.shape[-1] % BLOCK == 0 for s in stacks):
                    for s in stacks:
                        s.copy_(_rounded(s))
                        rounded += 1
    return rounded
