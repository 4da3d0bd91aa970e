"""Fresh numbers for the reduction variables (`_r<n>`) that inlining renames (compiler/fusion/fuse.py's `inline`).

Inlining a producer renames its reductions' variables so that they cannot capture the reader's. A pass that
inlines after others must not reuse a number they took: it numbers from one above the highest in the program,
rather than from a range guessed to be free.
"""

from __future__ import annotations

import itertools
import re
from typing import Iterator

from luminal.compiler.kernels import ir

_NUMBERED = re.compile(r"_r(\d+)")


def _variables(v: ir.Value) -> list[str]:
    if isinstance(v, (ir.Reduce, ir.Contract)):
        return [v.var]
    if isinstance(v, ir.Attend):
        return [v.s_var, v.e_var]
    return []


def _values(k: ir.Kernel) -> list[ir.Value]:
    return [k.body] if isinstance(k, ir.LoopKernel) else [k.dest, k.at, k.src]


def highest_reduction_number(program: ir.KernelProgram) -> int:
    """The largest n of a `_r<n>` reduction variable in the program's kernels; -1 where there is none."""
    numbers = [
        int(m.group(1))
        for k in program.kernels
        for value in _values(k)
        for node in ir.walk(value)
        for name in _variables(node)
        if (m := _NUMBERED.fullmatch(name))
    ]
    return max(numbers, default=-1)


def fresh_reduction_numbers(program: ir.KernelProgram) -> Iterator[int]:
    """Numbers no reduction variable of `program` uses: from one above the highest, counting up."""
    return itertools.count(highest_reduction_number(program) + 1)
