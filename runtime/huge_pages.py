"""Zeroed arrays carved from one anonymous mapping that asks Linux for 2 MiB pages (transparent huge pages).

A program's packed weight panels are read end to end on every run, and a model's are larger than the caches: each
4 KiB page of them costs a TLB miss and a page walk. numpy asks for huge pages only for arrays of 4 MiB or more,
and a 384 x 384 layer's panels are 0.6 MiB, each its own mapping: a MiniLM-shaped encoder's 42 MB of panels sat
on 4 KiB pages. One mapping for all of them, advised MADV_HUGEPAGE (what THP's default "madvise" mode waits for),
puts them on 2 MiB pages where the kernel has them to give; elsewhere the advice is skipped and nothing changes.
On a 2-vCPU AMD Zen 5 the 125M Llama's one-row decode GEMMs read their 400 MB of panels in 4.93-5.07 ms so against
5.33-5.39 on 4 KiB pages (bench/step_kernels.py with ENABLED set each way, the calls' minima, two runs each way, load
~2.5); the encoder gained 0.5-3% (bench/encoder_variants.py --no-huge-pages: its prefetched panels wait on memory,
not on page walks).
"""

from __future__ import annotations

import mmap

import numpy as np

ALIGN = 64  # each array starts on a cache line, as the kernels' vector loads assume
HUGE = 2 << 20
ENABLED = True  # whether to advise huge pages: bench A/B runs turn it off to measure what it is worth


def zeroed_together(sizes: dict[str, tuple[int, np.dtype]]) -> dict[str, np.ndarray]:
    """{name: zeroed array of (count, dtype)}, all views into one mapping (which they keep alive)."""
    if not sizes:
        return {}
    offsets, total = {}, 0
    for name, (count, dtype) in sizes.items():
        offsets[name] = total
        total += (int(count) * np.dtype(dtype).itemsize + ALIGN - 1) // ALIGN * ALIGN
    huge = ENABLED and total >= HUGE and hasattr(mmap, "MADV_HUGEPAGE")  # a smaller one would only be bloated
    slack = HUGE if huge else 0  # room to start the arrays 2 MiB aligned (a mapping is only page aligned)
    # Private: a shared anonymous mapping is shmem, which THP leaves alone. Anonymous: zero-filled.
    region = mmap.mmap(-1, max(total + slack, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge:
        try:
            region.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # a kernel without THP: ordinary pages
            pass
    raw = np.frombuffer(region, np.uint8)
    base = -raw.ctypes.data % HUGE if huge else 0
    return {
        name: raw[base + offsets[name] : base + offsets[name] + int(count) * np.dtype(dtype).itemsize].view(dtype)
        for name, (count, dtype) in sizes.items()
    }
