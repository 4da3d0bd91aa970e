"""CUDA for an attention kernel (a loop kernel whose body is an `ir.Attend`): a block per query row.

The block stages the row's query in shared memory, then walks the keys in blocks of its thread count: each
thread computes one key's score (its dot product with the query, scaled, plus the bias), the block folds the
scores' peak and the block's exponentials' sum into the running ones (the online softmax: what was summed so far
is rescaled by exp2((old peak - new peak) * log2 e)), and each thread accumulates p·v for its output columns.
Nothing of size keys x queries is stored. The softmax is the graph's own, as the C kernel computes it
(codegen_attention.py): the peak is at least the lowest float32 and the safe form adds 1 to a sum under 0.5.
Flash decoding ("attention_split", attention_plan.splits): a block per query row and block of FLASH_KEYS keys
runs the same loop over its keys only and stores its peak, its sum and its unnormalised outputs in the kernel's
partials buffer; compiler/gpu/flash_decode.py then combines a row's blocks, in a kernel of its own or, as
"flash_decode" (compiler/cuda/arrivals.py), in the row's last block to finish.
"""

from __future__ import annotations

from luminal.compiler.analysis.attention_plan import FLASH_KEYS, LOG2_E, MAX_HEAD_DIM, PARTIAL_EXTRA, fits
from luminal.compiler.analysis.gemm_operands import decode
from luminal.compiler.gpu.emitter import CudaEmitter
from luminal.compiler.gpu.flash_decode import last_block_combine
from luminal.compiler.gpu.kernels import FOOT, head, pointers
from luminal.compiler.gpu.launch import Launch
from luminal.compiler.kernels import ir
from luminal.compiler.renderer.dialects import CUDA
from luminal.compiler.renderer.render import literal
from luminal.view import ShapeTracker


def _operand(launch: Launch, value: ir.Value, target: str, indent: int) -> list[str]:
    """Statements that evaluate `value` (at the locals named like its index variables) into `target`."""
    e = CudaEmitter(pointers(launch))
    e.indent = indent
    result = e.emit(value)
    return e.lines + ["  " * indent + f"{target} = {result};"]


def kernel_source(launch: Launch, k: ir.LoopKernel, buffers, symbols) -> list[str]:
    a: ir.Attend = k.body
    rank = len(k.shape)
    if rank < 2 or not fits(a.e_extent, k.shape[-1]):  # recognition guarantees both; a loaded artifact may not
        raise ValueError(f"attention kernel {k.name}: needs [..., L, N] with head dims in 1..{MAX_HEAD_DIM}")
    threads, s, e = launch.block, a.s_var, a.e_var
    e_dim, n_dim = int(a.e_extent.lo), int(k.shape[-1].lo)
    columns = -(-n_dim // threads)  # output columns per thread
    col = f"_i{rank - 1}"
    split = launch.shape in ("attention_split", "flash_decode")
    lines = head(launch, buffers, symbols)
    if split:  # this block's keys: [lm_begin, lm_S)
        lines += [
            f"  const int64_t lm_keys_all = {a.s_extent.render_c()};",
            f"  const int64_t lm_splits = (lm_keys_all + {FLASH_KEYS - 1}) / {FLASH_KEYS};",
            f"  const int64_t lm_row = {CUDA.block_index} / lm_splits;",
            f"  const int64_t lm_begin = {CUDA.block_index} % lm_splits * {FLASH_KEYS};",
            f"  const int64_t lm_S = lm_keys_all - lm_begin < {FLASH_KEYS} ? lm_keys_all : lm_begin + {FLASH_KEYS};",
        ]
    else:
        lines += [f"  const int64_t lm_row = {CUDA.block_index}, lm_begin = 0, lm_S = {a.s_extent.render_c()};"]
    lines += ["  " + x for x in decode("lm_row", k.shape, tuple(range(rank - 1)))]
    lines += [f"  __shared__ float lm_q[{e_dim}], lm_p[{threads}];"]
    lines += [f"  for (int64_t {e} = threadIdx.x; {e} < {e_dim}; {e} += {threads}) {{"]
    lines += _operand(launch, a.q, f"lm_q[{e}]", 2) + ["  }", f"  {CUDA.barrier}"]
    lines += [
        "  float lm_peak = -0x1.fffffep+127f, lm_total = 0.0f;",
        f"  float lm_acc[{columns}];",
        f"  for (int lm_c = 0; lm_c < {columns}; lm_c++) lm_acc[lm_c] = 0.0f;",
        f"  for (int64_t lm_k0 = lm_begin; lm_k0 < lm_S; lm_k0 += {threads}) {{",
        "    float lm_score = -INFINITY;",
        f"    const int64_t {s} = lm_k0 + threadIdx.x;",
        f"    if ({s} < lm_S) {{",
        "      float lm_dot = 0.0f, lm_k, lm_bias;",
        f"      for (int64_t {e} = 0; {e} < {e_dim}; {e}++) {{",
    ]
    lines += _operand(launch, a.k, "lm_k", 4) + [f"        lm_dot = fmaf(lm_q[{e}], lm_k, lm_dot);", "      }"]
    lines += _operand(launch, a.bias, "lm_bias", 3)
    lines += [f"      lm_score = lm_dot * {literal(a.scale, a.dtype)} + lm_bias;", "    }"]
    lines += [
        "    const float lm_new = fmaxf(lm_peak, lm_block_fold(lm_score, lm_fold_fmax()));",
        f"    const float lm_rescale = exp2f((lm_peak - lm_new) * {LOG2_E});",
        f"    const float lm_own = {s} < lm_S ? exp2f((lm_score - lm_new) * {LOG2_E}) : 0.0f;",
        "    lm_total = lm_total * lm_rescale + lm_block_fold(lm_own, lm_fold_sum());",
        "    lm_peak = lm_new;",
        "    lm_p[threadIdx.x] = lm_own;",
        f"    {CUDA.barrier}",
        f"    const int64_t lm_keys = lm_S - lm_k0 < {threads} ? lm_S - lm_k0 : {threads};",
        f"    for (int lm_c = 0; lm_c < {columns}; lm_c++) {{",
        f"      const int64_t {col} = threadIdx.x + lm_c * {threads};",
        f"      if ({col} < {n_dim}) {{",
        "        float lm_pv = 0.0f, lm_v;",
        "        for (int64_t lm_j = 0; lm_j < lm_keys; lm_j++) {",
        f"          const int64_t {s} = lm_k0 + lm_j;",
    ]
    lines += _operand(launch, a.v, "lm_v", 5) + ["          lm_pv = fmaf(lm_p[lm_j], lm_v, lm_pv);", "        }"]
    lines += [
        "        lm_acc[lm_c] = lm_acc[lm_c] * lm_rescale + lm_pv;",
        "      }",
        "    }",
        f"    {CUDA.barrier}",
        "  }",
    ]
    if launch.shape == "flash_decode":  # the partials at _q1, the output at _q0
        return lines + _store_partial(n_dim, threads, columns, "_q1") + last_block_combine(k, threads, buffers) + FOOT
    if split:
        return lines + _store_partial(n_dim, threads, columns, "_q0") + FOOT
    guard = " + (lm_total < 0.5f ? 1.0f : 0.0f)" if a.safe else ""
    out = ShapeTracker.contiguous(k.shape).index.render_c()
    lines += [
        f"  const float lm_inv = 1.0f / (lm_total{guard});",
        f"  for (int lm_c = 0; lm_c < {columns}; lm_c++) {{",
        f"    const int64_t {col} = threadIdx.x + lm_c * {threads};",
        f"    if ({col} < {n_dim}) _q0[{out}] = {CUDA.store('lm_acc[lm_c] * lm_inv', buffers[k.out].dtype)};",
        "  }",
    ]
    return lines + FOOT


def _store_partial(n_dim: int, threads: int, columns: int, partials: str) -> list[str]:
    """The block's partial result at its slot of `partials` (block index x (N + 2) floats): peak, sum, unscaled
    outputs."""
    width = n_dim + PARTIAL_EXTRA
    return [
        f"  float* lm_part = {partials} + {CUDA.block_index} * {width};",
        "  if (threadIdx.x == 0) { lm_part[0] = lm_peak; lm_part[1] = lm_total; }",
        f"  for (int lm_c = 0; lm_c < {columns}; lm_c++) {{",
        f"    const int64_t lm_col = threadIdx.x + lm_c * {threads};",
        f"    if (lm_col < {n_dim}) lm_part[{PARTIAL_EXTRA} + lm_col] = lm_acc[lm_c];",
        "  }",
    ]
