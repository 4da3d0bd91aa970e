"""A program's launch plan, planned once and kept for the next asker.

The ranking (a candidate's merged launches share one overhead), its source, the chosen program's memory plan and
its run plan all ask the backend's planner for the same plan of the same program object; planning it (each
kernel's launches, then the merges of consecutive ones) was a tenth of a GPU compile, three or four times over.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import fields
from typing import Callable

from luminal.compiler.gpu.launch_runs import Planned
from luminal.compiler.kernels import ir

Planner = Callable[..., list[Planned]]  # planner(p, at_load=False): the launches of a run (or of the load) of p
KEPT = 32  # plans: a compile's variants (up to four per candidate, three candidates), run and load plan each


def planned_once(planner: Planner) -> Planner:
    """`planner` remembering its last KEPT plans. A plan is reused for a program whose kernels are the same
    objects (kernels are immutable; a value-equal kernel is not taken for one: 0.0 and -0.0 compare equal) and
    whose other tables are equal; the caller gets its own list."""
    kept: dict[tuple, tuple[tuple[ir.Kernel, ...], list[Planned]]] = {}
    lock = threading.Lock()  # compiles may run in threads (the embedded server's compile jobs)

    @functools.wraps(planner)
    def planned(p: ir.KernelProgram, at_load: bool = False) -> list[Planned]:
        key = (at_load, *_tables(p))
        with lock:
            found = kept.get(key)
        if found is None:
            found = (tuple(p.kernels), planner(p, at_load))  # the kernels held, so that their ids stay theirs
            with lock:
                kept[key] = found
                while len(kept) > KEPT:
                    del kept[next(iter(kept))]  # the oldest first
        return list(found[1])

    return planned


def _tables(p: ir.KernelProgram) -> tuple:
    """What a plan of `p` depends on: its kernels by identity, every other table by value."""
    tables = [tuple(map(id, p.kernels))]
    tables += [tuple(getattr(p, f.name).items()) for f in fields(p) if f.name != "kernels"]
    return tuple(tables)
