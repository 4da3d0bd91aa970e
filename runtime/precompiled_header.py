"""A shim's stand-in header precompiled once, so that each build of a program parses it in milliseconds.

Both host shims compile every program as C++20 against their stand-in header (runtime/cuda/host_shim/cuda_shim.h,
runtime/metal/host_shim/metal_stdlib), which pulls in <cmath> (CUDA's) and the fibers: parsing them was about 0.45 s
of each g++ run, more than half of a small program's build, when the headers also used <vector> and <atomic>. GCC
(and clang, which reads the same `-include`/first-`#include` convention) uses `<header>.gch` from the first folder
on the include path that holds one, when it was built by the same compiler with the same flags; otherwise it reads
the header itself. So a precompiled header changes how long a build takes, never what it builds.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path


def folder(cxx: str, flags: list[str], header: Path, includes: list[str], texts: str, cache: Path) -> Path | None:
    """A folder holding `header`'s precompiled form for `cxx` and `flags` (the program build's own, less -shared),
    to put first on that build's include path; None where the compiler cannot precompile it (the build then
    parses the header as before). `texts` is every header it reads, which keys the cache with the flags."""
    key = hashlib.sha256("\0".join([cxx, *flags, *includes, texts]).encode()).hexdigest()[:32]
    where = cache / key
    gch = where / f"{header.name}.gch"
    if gch.exists():
        return where
    where.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=where) as tmp:  # written whole, then renamed: concurrent builds race safely
        staged = Path(tmp) / gch.name
        cmd = [cxx, *flags, "-x", "c++-header", *includes, "-o", str(staged), str(header)]
        if subprocess.run(cmd, capture_output=True).returncode != 0:
            return None
        os.replace(staged, gch)
    return where
