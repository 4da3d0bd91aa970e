"""CUDA for the second kernel of flash decoding: a block per query row combines its key blocks' partial results.

Each key block of the row (compiler/cuda/attention.py, "attention_split") stored its peak m_j, its sum of
exponentials t_j (relative to m_j) and its unnormalised outputs a_j. With m the largest m_j, the row's sum is
sum_j t_j exp2((m_j - m) log2 e) and each output sum_j a_j exp2((m_j - m) log2 e) divided by it (plus 1 where the
sum is under 0.5, for the graph's safe softmax): the same online rescaling the single-block kernel does between
its chunks, in a fixed order, so the result does not depend on timing.
"""

from __future__ import annotations

from luminal.compiler import ir
from luminal.compiler.attention_plan import FLASH_KEYS, LOG2_E, PARTIAL_EXTRA
from luminal.compiler.cuda.kernels import FOOT, head
from luminal.compiler.cuda.launch import Launch
from luminal.compiler.dialects import CUDA


def combine_source(launch: Launch, k: ir.LoopKernel, buffers, symbols) -> list[str]:
    a: ir.Attend = k.body
    n_dim = int(k.shape[-1].lo)
    width = n_dim + PARTIAL_EXTRA
    guard = " + (lm_total < 0.5f ? 1.0f : 0.0f)" if a.safe else ""
    lines = head(launch, buffers, symbols)
    lines += [
        f"  const int64_t lm_row = {CUDA.block_index};",
        f"  const int64_t lm_splits = ({a.s_extent.render_c()} + {FLASH_KEYS - 1}) / {FLASH_KEYS};",
        f"  const float* lm_part = _q1 + lm_row * lm_splits * {width};",
        "  float lm_peak = -0x1.fffffep+127f, lm_total = 0.0f;",
        f"  for (int64_t lm_j = 0; lm_j < lm_splits; lm_j++) lm_peak = fmaxf(lm_peak, lm_part[lm_j * {width}]);",
        "  for (int64_t lm_j = 0; lm_j < lm_splits; lm_j++)",
        f"    lm_total += lm_part[lm_j * {width} + 1] * exp2f((lm_part[lm_j * {width}] - lm_peak) * {LOG2_E});",
        f"  const float lm_inv = 1.0f / (lm_total{guard});",
        f"  for (int64_t lm_col = threadIdx.x; lm_col < {n_dim}; lm_col += {launch.block}) {{",
        "    float lm_acc = 0.0f;",
        "    for (int64_t lm_j = 0; lm_j < lm_splits; lm_j++) {",
        f"      const float* lm_p = lm_part + lm_j * {width};",
        f"      lm_acc += lm_p[{PARTIAL_EXTRA} + lm_col] * exp2f((lm_p[0] - lm_peak) * {LOG2_E});",
        "    }",
        f"    _q0[lm_row * {n_dim} + lm_col] = {CUDA.store('lm_acc * lm_inv', buffers[k.out].dtype)};",
        "  }",
    ]
    return lines + FOOT
