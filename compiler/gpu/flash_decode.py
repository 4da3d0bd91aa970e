"""CUDA for flash decoding's combine: a query row's key blocks' partial results into the row's output.

Each key block of the row (compiler/gpu/attention.py, "attention_split") stored its peak m_j, its sum of
exponentials t_j (relative to m_j) and its unnormalised outputs a_j. With m the largest m_j, the row's sum is
sum_j t_j exp2((m_j - m) log2 e) and each output sum_j a_j exp2((m_j - m) log2 e) divided by it (plus 1 where the
sum is under 0.5, for the graph's safe softmax): the same online rescaling the single-block kernel does between
its chunks, in a fixed order, so the result does not depend on timing.

It runs as a kernel of its own, a block per row ("combine"), or, on CUDA, at the end of the split kernel in the
last of the row's blocks to finish ("flash_decode", compiler/cuda/arrivals.py).
"""

from __future__ import annotations

from luminal.compiler.analysis.attention_plan import FLASH_KEYS, LOG2_E, PARTIAL_EXTRA
from luminal.compiler.gpu.kernels import FOOT, head
from luminal.compiler.gpu.launch import Launch
from luminal.compiler.kernels import ir
from luminal.compiler.renderer.dialects import CUDA


def combine_lines(a: ir.Attend, n_dim: int, threads: int, out_dtype, partials: str, load: str = "") -> list[str]:
    """Row `lm_row`'s output into `_q0` from its `lm_splits` partials at `partials` (a float pointer), each read
    as `load(&x)` (e.g. "__ldcg": past L1) or plainly where `load` is empty."""
    width = n_dim + PARTIAL_EXTRA

    def read(offset: str) -> str:
        return f"{load}(&lm_part[{offset}])" if load else f"lm_part[{offset}]"

    guard = " + (lm_total < 0.5f ? 1.0f : 0.0f)" if a.safe else ""
    return [
        f"  const float* lm_part = {partials} + lm_row * lm_splits * {width};",
        "  float lm_peak = -0x1.fffffep+127f, lm_total = 0.0f;",
        f"  for (int64_t lm_j = 0; lm_j < lm_splits; lm_j++) lm_peak = fmaxf(lm_peak, {read(f'lm_j * {width}')});",
        "  for (int64_t lm_j = 0; lm_j < lm_splits; lm_j++)",
        f"    lm_total += {read(f'lm_j * {width} + 1')} * exp2f(({read(f'lm_j * {width}')} - lm_peak) * {LOG2_E});",
        f"  const float lm_inv = 1.0f / (lm_total{guard});",
        f"  for (int64_t lm_col = threadIdx.x; lm_col < {n_dim}; lm_col += {threads}) {{",
        "    float lm_acc = 0.0f;",
        "    for (int64_t lm_j = 0; lm_j < lm_splits; lm_j++)",
        f"      lm_acc += {read(f'lm_j * {width} + {PARTIAL_EXTRA} + lm_col')} * "
        f"exp2f(({read(f'lm_j * {width}')} - lm_peak) * {LOG2_E});",
        f"    _q0[lm_row * {n_dim} + lm_col] = {CUDA.store('lm_acc * lm_inv', out_dtype)};",
        "  }",
    ]


def combine_source(launch: Launch, k: ir.LoopKernel, buffers, symbols) -> list[str]:
    a: ir.Attend = k.body
    lines = head(launch, buffers, symbols)
    lines += [
        f"  const int64_t lm_row = {CUDA.block_index};",
        f"  const int64_t lm_splits = ({a.s_extent.render_c()} + {FLASH_KEYS - 1}) / {FLASH_KEYS};",
    ]
    lines += combine_lines(a, int(k.shape[-1].lo), launch.block, buffers[k.out].dtype, "_q1")
    return lines + FOOT


def last_block_combine(k: ir.LoopKernel, threads: int, buffers) -> list[str]:
    """The end of a "flash_decode" kernel (compiler/cuda/arrivals.py), after the block stored its partial at
    `_q1`: count the block in at the row's counter `_q2`; the last to arrive combines and resets the counter."""
    lines = [
        "  __threadfence();  /* this thread's partial is visible device-wide before the block counts itself in */",
        f"  {CUDA.barrier}",
        "  __shared__ int lm_last;",
        "  if (threadIdx.x == 0) lm_last = atomicAdd(&_q2[lm_row], 1) == (int)lm_splits - 1;",
        f"  {CUDA.barrier}",
        "  if (lm_last) {",
        "    __threadfence();",
    ]
    body = combine_lines(k.body, int(k.shape[-1].lo), threads, buffers[k.out].dtype, "_q1", "__ldcg")
    lines += ["  " + line for line in body]
    lines += ["    if (threadIdx.x == 0) _q2[lm_row] = 0;  /* ready for the next run or graph replay */", "  }"]
    return lines
