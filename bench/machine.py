"""What the benchmarks print beside their figures so a reader can weigh them: the CPU's model, and the CPU time
their processes used."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds (user + system) used so far by this process (all its threads) and by its live descendants (the
    worker processes a platform started), read from /proc: on a shared machine CPU per token is steadier than the
    wall-clock rates, which the other work's load moves."""
    children: dict[int, list[int]] = {}
    used: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)  # field 4 of stat: the parent's pid
        used[pid] = (int(fields[11]) + int(fields[12])) / tick  # fields 14 and 15: user and system ticks
    descendants, todo = 0.0, list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        descendants += used.get(pid, 0.0)
        todo.extend(children.get(pid, []))
    return time.process_time(), descendants
