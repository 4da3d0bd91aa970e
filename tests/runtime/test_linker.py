"""The linker choice: gold where the compiler driver links with it, else the driver's default, and a library
linked either way loads and runs the same."""

import ctypes
import shutil
import subprocess

import pytest

from luminal.runtime import linker
from luminal.runtime.cpu import compiler


def test_a_driver_that_cannot_link_with_gold_keeps_its_default(tmp_path):
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    assert linker.link_flags(str(fake)) == []


@pytest.mark.needs("g++")
def test_a_library_linked_with_the_chosen_flags_loads(tmp_path):
    cc = compiler()
    flags = linker.link_flags(cc)
    assert flags == ([linker.GOLD] if shutil.which("ld.gold") else flags)
    src = tmp_path / "f.c"
    src.write_text("int twice(int x) { return 2 * x; }\n")
    for name, extra in (("chosen", flags), ("default", [])):
        out = tmp_path / f"{name}.so"
        subprocess.run([cc, "-shared", "-fPIC", *extra, "-o", str(out), str(src)], check=True)
        assert ctypes.CDLL(str(out)).twice(21) == 42
