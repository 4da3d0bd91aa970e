"""Processes that load the same program at once build its library once (runtime/build_lock.py): the others wait
for the first build and load what it wrote."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from luminal.runtime import build_lock

SOURCE = "int lm_answer(void) { return 42; }\n"
# Builds the library of SOURCE and calls it; the CPU runtime's builder, as a worker process's load runs it.
BUILD = f"""
import ctypes
from luminal.runtime import cpu
print(ctypes.CDLL(str(cpu.build_library({SOURCE!r}))).lm_answer())
"""


def logging_compiler(tmp_path: Path) -> tuple[Path, Path]:
    """A C compiler that notes each program build in a log, then sleeps a second and compiles: a build that
    runs in two processes at once shows up twice."""
    cc, log = tmp_path / "cc", tmp_path / "builds.log"
    real = shutil.which("cc") or shutil.which("gcc")
    cc.write_text(f'#!/bin/sh\ncase "$*" in *program.c*) echo build >> {log}; sleep 1;; esac\nexec {real} "$@"\n')
    cc.chmod(0o755)
    return cc, log


@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="needs a C compiler")
def test_two_processes_loading_one_program_compile_it_once(tmp_path):
    cc, log = logging_compiler(tmp_path)
    env = {**os.environ, "CC": str(cc), "LUMINAL_CACHE_DIR": str(tmp_path / "cache")}
    loads = [subprocess.Popen([sys.executable, "-c", BUILD], env=env, stdout=subprocess.PIPE) for _ in range(2)]
    outputs = [p.communicate(timeout=120)[0].decode().strip() for p in loads]
    assert [p.returncode for p in loads] == [0, 0]
    assert outputs == ["42", "42"]
    assert log.read_text().splitlines() == ["build"]


def test_the_lock_is_exclusive_between_processes(tmp_path):
    library = tmp_path / "program.so"
    probe = (
        "import fcntl, sys\n"
        f"f = open({str(library.with_suffix('.lock'))!r}, 'a')\n"
        "try:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(3)\n"
    )
    with build_lock.held(library):
        assert subprocess.run([sys.executable, "-c", probe]).returncode == 3
    assert subprocess.run([sys.executable, "-c", probe]).returncode == 0
