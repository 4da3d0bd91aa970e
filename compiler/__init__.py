"""The compiler: passes, search, kernel IR, code generation, memory planning, compiled programs."""

import hashlib
from pathlib import Path

import luminal  # the parent package, already imported: its location, not a cycle

FORMAT_GENERATION = 1  # bump when the meaning of the kernel IR changes without a source change (never, so far)


def _source_digest() -> str:
    """sha256 over the sources that decide what a compile produces: this package and the `luminal` core.

    A hand-bumped number alone would let a cached program outlive an edit to lowering or fusion that forgot
    the bump, silently running stale kernels; hashing the sources makes any edit a cache miss.
    """
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for root in (here, Path(luminal.__file__).resolve().parent):
        for path in sorted(root.rglob("*.py")):
            h.update(path.relative_to(root.parent).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


COMPILER_VERSION = f"{FORMAT_GENERATION}+{_source_digest()}"
