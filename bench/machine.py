"""What the benchmarks print beside their figures so a reader can weigh them: the CPU's model."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"
