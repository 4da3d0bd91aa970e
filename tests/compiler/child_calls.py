"""Functions for search children to run in tests (compiler/search/child_pool.py): importable by name, and light, so
a child imports nothing more."""

from __future__ import annotations

import mmap
import os


def map_in(size: int) -> tuple[int, int]:
    """Map `size` bytes of address space (what RLIMIT_AS counts) without touching them; the child's pid and size."""
    with mmap.mmap(-1, size) as mapped:
        return os.getpid(), len(mapped)
