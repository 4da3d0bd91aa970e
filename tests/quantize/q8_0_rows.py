"""A torch statement of W8A8 (llama.cpp's Q8_0 x Q8_0): activation rows quantised to Q8_0, times a Q8_0 weight, and
rows and weights holding the blocks that test its edges."""

from __future__ import annotations

import numpy as np
import torch

from luminal.quantize import quantize_q8_0


def torch_q8_0_rows(x: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(int values [..., K / 32, 32], scales [..., K / 32]) of x's rows: per block scale = max |x| / 127 and
    q = round-half-even(x * (1 / scale)), a block whose scale is not a normal float giving zeros."""
    blocks = torch.from_numpy(x).reshape(*x.shape[:-1], -1, 32)
    scale = blocks.abs().amax(-1) * torch.tensor(1 / 127, dtype=torch.float32)
    inverse = 1 / (scale + (scale < 2.0**-126).float())
    return torch.round(blocks * inverse[..., None]).to(torch.int64), scale


def torch_w8a8(x: np.ndarray, q: np.ndarray, s: np.ndarray) -> np.ndarray:
    """x [M, K] through Q8_0 times the Q8_0 weight (q [N, K], s [N, K / 32]): exact integer block sums, each times
    both blocks' scales, summed in float64."""
    qa, sa = torch_q8_0_rows(x)
    qw = torch.from_numpy(q).to(torch.int64).reshape(q.shape[0], -1, 32)
    sums = torch.einsum("mbj,nbj->mnb", qa, qw).double()
    return (sums * sa.double()[:, None, :] * torch.from_numpy(s).double()[None]).sum(-1).numpy()


def extreme_rows(k: int, rng) -> np.ndarray:
    """Rows [6, k] with the blocks that test the edges: all zeros (scale 0), every value at +-max (q = +-127: pairs
    of 127 * 127 products, the largest the int16 step holds), alternating signs, subnormal values (the scale is
    not a normal float: zeros), and values whose quotients land near halves."""
    x = rng.standard_normal((6, k)).astype(np.float32)
    x[0, :32] = 0
    x[1, :32] = 3.5
    x[1, 32:64] = -3.5
    x[2, :32] = np.where(np.arange(32) % 2, 2.0, -2.0)
    x[3, :32] = 1e-40
    x[4, :32] = np.arange(32) - 15.5
    return x


def extreme_weight(n: int, k: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """A Q8_0 weight [n, k] with a zero row (every scale 0) and blocks of all 127, all -127 and alternating."""
    w = rng.standard_normal((n, k)).astype(np.float32)
    w[0] = 0
    w[1, :32], w[2, :32] = 1.0, -1.0
    w[3, :32] = np.where(np.arange(32) % 2, -1.0, 1.0)
    return quantize_q8_0(w)
