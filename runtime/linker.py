"""Which linker a program's shared library is linked with: gold where the compiler driver can use it.

Every compiled program (the CPU target's C, each host-shim build of CUDA or MSL) is linked into a small shared
library. GNU ld (bfd) took about 0.05 s of CPU to link one, a third of a small shim build; gold links the same
objects in about 0.01 s. The linker changes how long a build takes, never the code it runs: the objects, libraries
and symbols are the same. Where gold is missing (or the driver is clang without it) the default linker is used.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

GOLD = "-fuse-ld=gold"
_CHOSEN: dict[str, list[str]] = {}  # compiler driver -> the flags that pick its linker


def link_flags(cc: str) -> list[str]:
    """[GOLD] where `cc` links a shared library with gold, else [] (its default linker). Probed once per driver."""
    if cc not in _CHOSEN:
        with tempfile.TemporaryDirectory() as tmp:
            src, out = Path(tmp) / "probe.c", Path(tmp) / "probe.so"
            src.write_text("int lm_linker_probe(void) { return 0; }\n")
            cmd = [cc, "-shared", "-fPIC", GOLD, "-x", "c", "-o", str(out), str(src)]
            linked = subprocess.run(cmd, capture_output=True).returncode == 0 and out.exists()
        _CHOSEN[cc] = [GOLD] if linked else []
    return _CHOSEN[cc]
