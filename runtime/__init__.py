"""Runtimes: `Runtime.load(program, weights) -> Executable`; `Executable.run(inputs, dims=None)`.

`runtime_for(kind)` finds the runtime of a target kind (runtime/registry.py); one that cannot run here raises
`RuntimeUnavailable`, naming what is missing.
"""

from luminal.runtime.registry import Executable, Runtime, RuntimeUnavailable, runtime_for

__all__ = ["Executable", "Runtime", "RuntimeUnavailable", "runtime_for"]
