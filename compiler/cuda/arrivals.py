"""Flash decoding in one launch on CUDA: the key blocks of a query row count their arrivals, and the last one
to arrive combines the row's partial results (the "last block" pattern), so the combine needs no launch of its
own.

Each block stores its partial result, fences it (__threadfence: visible device-wide before what follows), then
one of its threads adds 1 to the row's counter; the block that reads splits - 1 back knows every other block of
its row has stored, reads their partials past L1 (__ldcg) and writes the output, then sets the counter back to 0
for the next run (a CUDA graph replays the launch with the same counters). The counters are a buffer of their
own role: allocated once per executable, zeroed then, never shared with another buffer (compiler/analysis/memory.py
plans only temps and outputs). One counter per query row, at the rows' upper bound; where that is not known
small, the attention keeps its two launches.
"""

from __future__ import annotations

from dataclasses import replace

from luminal import dtypes as dt
from luminal.compiler.analysis import attention_plan
from luminal.compiler.gpu.launch import Launch
from luminal.compiler.kernels import ir
from luminal.compiler.storage.run_plan import COUNTERS
from luminal.symbolic import as_expr
from luminal.view import dims_product

ROLE = COUNTERS  # the role's name is the artifact's (compiler/storage/run_plan.py)
MAX_ROWS = 1 << 20  # counters per attention: 4 MiB at most


def arrivals(k: ir.Kernel) -> str:
    return f"{k.name}_arrivals"


def add_arrival_counters(program: ir.KernelProgram) -> ir.KernelProgram:
    """`program` with the counters of every flash-decoding attention whose rows are bounded by MAX_ROWS."""
    buffers = dict(program.buffers)
    for k in program.kernels:
        if attention_plan.splits(k) is None:
            continue
        rows = dims_product(k.shape[:-1]).hi
        if rows <= MAX_ROWS:
            buffers[arrivals(k)] = ir.Buffer(arrivals(k), dt.int32, as_expr(int(rows)), ROLE, k.name)
    return replace(program, buffers=buffers)


def fold_combine(k: ir.Kernel, p: ir.KernelProgram, planned: list[Launch]) -> list[Launch]:
    """The split and combine launches of kernel `k` as one "flash_decode" launch where `k` has counters."""
    if [launch.shape for launch in planned] != ["attention_split", "combine"] or arrivals(k) not in p.buffers:
        return planned
    split = planned[0]
    buffers = (k.out, attention_plan.partials(k), arrivals(k), *split.buffers[1:])
    return [Launch(f"{k.name}_flash", "flash_decode", split.grid, split.block, buffers, writes=3)]
