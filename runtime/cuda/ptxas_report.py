"""What ptxas reports per kernel when asked to be verbose (nvcc --resource-usage, NVRTC -Xptxas=-v): registers,
spilled bytes and static shared memory, read from its text log."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class KernelUsage:
    kernel: str
    arch: str
    registers: int
    spill_bytes: int  # spill stores + spill loads
    shared_bytes: int


def parse(report: str) -> list[KernelUsage]:
    """Each kernel's usage in the order ptxas compiled them (one entry per kernel and architecture)."""
    usages, kernel, arch, spill = [], None, None, 0
    for line in report.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)' for 'sm_(\d+a?)'", line):
            kernel, arch, spill = m.group(1), m.group(2), 0
        elif m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line):
            spill = int(m.group(1)) + int(m.group(2))
        elif (m := re.search(r"Used (\d+) registers", line)) and kernel:
            smem = re.search(r"(\d+) bytes smem", line)
            usages.append(KernelUsage(kernel, arch, int(m.group(1)), spill, int(smem.group(1)) if smem else 0))
            kernel = None
    return usages
