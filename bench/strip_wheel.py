"""Rewrite a wheel in place with its extension modules' debug information stripped, RECORD updated to match.

    python bench/strip_wheel.py .whl/egglog-*.whl

egglog's wheel is 49 MB, almost all of it the DWARF of its Rust extension (219 MB unpacked, 15 MB without it):
stripped, the wheels the GPU machine needs fit the device call's 64 MiB carry together with the platform's.
`strip --strip-debug` removes only debug sections; the code and its symbols are unchanged.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _stripped(data: bytes) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "module.so"
        path.write_bytes(data)
        subprocess.run(["strip", "--strip-debug", str(path)], check=True)
        return path.read_bytes()


def strip_wheel(wheel: Path) -> tuple[int, int]:
    """Strip `wheel`'s `.so` members; returns its size before and after."""
    before = wheel.stat().st_size
    with zipfile.ZipFile(wheel) as z:
        members = [(info, z.read(info)) for info in z.infolist()]
    contents = {info.filename: _stripped(data) if info.filename.endswith(".so") else data for info, data in members}
    (record,) = [name for name in contents if name.endswith(".dist-info/RECORD")]
    lines = [_record_line(name, data) for name, data in contents.items() if name != record]
    contents[record] = ("\n".join([*lines, f"{record},,"]) + "\n").encode()
    rewritten = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(rewritten, "w") as z:
        for info, _ in members:
            z.writestr(info, contents[info.filename], zipfile.ZIP_DEFLATED, 9)
    rewritten.replace(wheel)
    return before, wheel.stat().st_size


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        old, new = strip_wheel(Path(arg))
        print(f"{Path(arg).name}: {old / 1e6:.1f} MB -> {new / 1e6:.1f} MB")
