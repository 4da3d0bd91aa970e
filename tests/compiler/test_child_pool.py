"""The warm search children (compiler/search/child_pool.py): reused from call to call, replaced when killed, timed
out or gone, under the limits of each call, and never outliving their parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from luminal.compiler.search.runner import Limits, SearchError, SearchOutOfMemory, SearchTimeout, run_isolated
from tests.compiler.child_calls import map_in


def gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether process `pid` has exited (a zombie counts: nothing may reap it in a container) within `within_s`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_one_child_serves_call_after_call():
    first = run_isolated(os.getpid)
    assert first != os.getpid()
    assert run_isolated(os.getpid) == first
    assert run_isolated(divmod, 7, 2) == (3, 1)


def test_an_error_in_python_keeps_the_child_and_its_message_comes_back():
    pid = run_isolated(os.getpid)
    with pytest.raises(SearchError, match="ZeroDivisionError"):
        run_isolated(divmod, 1, 0)
    assert run_isolated(os.getpid) == pid


def test_a_child_past_its_wall_clock_is_killed_and_the_next_call_gets_another():
    warm = run_isolated(os.getpid)  # the timed-out call below then runs in this child
    start = time.monotonic()
    with pytest.raises(SearchTimeout):
        run_isolated(time.sleep, 60, limits=Limits(wall_s=1.0))
    assert time.monotonic() - start < 10
    assert gone(warm), "the child that ran past its wall clock was not killed"
    assert run_isolated(os.getpid) != warm


def test_a_warm_child_killed_while_idle_is_replaced_without_the_caller_seeing_it():
    pid = run_isolated(os.getpid)
    os.kill(pid, signal.SIGKILL)
    assert gone(pid)
    again = run_isolated(os.getpid)
    assert again != pid


def test_a_child_that_exits_mid_call_is_an_error_not_a_loop():
    run_isolated(os.getpid)  # warm: its clean exit looks like an idle child leaving, retried once in a new one
    with pytest.raises(SearchError, match="exit code 0"):
        run_isolated(os._exit, 0)


def test_each_call_has_its_own_memory_limit_in_a_reused_child():
    pid = run_isolated(os.getpid, limits=Limits(memory_bytes=1 << 30))
    with pytest.raises(SearchOutOfMemory):
        run_isolated(bytearray, 3 << 30, limits=Limits(memory_bytes=1 << 30))
    assert gone(pid)  # the warm child ran the call that ran out of memory, and was not kept
    warm = run_isolated(os.getpid, limits=Limits(memory_bytes=1 << 30))
    # the 1 GiB limit of the last call is lifted: 1.5 GiB fits under this call's 4 GiB, in the same child
    assert run_isolated(map_in, 3 << 29, limits=Limits(memory_bytes=4 << 30)) == (warm, 3 << 29)
    with pytest.raises(SearchError, match="Cannot allocate memory"):  # and the next call's 1 GiB holds again
        run_isolated(map_in, 3 << 29, limits=Limits(memory_bytes=1 << 30))


def test_a_child_exits_when_its_parent_dies_even_if_its_pipes_stay_open(tmp_path):
    # The parent forks a sleeper that inherits the pipes to the child, then dies: the child sees no EOF and must
    # notice its parent is gone by itself.
    script, pids = tmp_path / "parent.py", tmp_path / "pids"
    script.write_text(
        textwrap.dedent(f"""
        import os, time
        from luminal.compiler.search.runner import run_isolated
        child = run_isolated(os.getpid)
        sleeper = os.fork()
        if sleeper == 0:
            time.sleep(60)
            os._exit(0)
        open({str(pids)!r}, "w").write(f"{{child}} {{sleeper}}")
        os._exit(0)
    """)
    )
    subprocess.run([sys.executable, str(script)], stdout=subprocess.DEVNULL, timeout=120, check=True)
    child, sleeper = map(int, pids.read_text().split())
    try:
        assert gone(child, 15), "the search child outlived its parent"
    finally:
        os.kill(sleeper, signal.SIGKILL)


def test_a_forked_process_starts_its_own_children(tmp_path):
    script = tmp_path / "fork.py"
    script.write_text(
        textwrap.dedent("""
        import os
        from luminal.compiler.search.runner import run_isolated
        before = run_isolated(os.getpid)
        read, write = os.pipe()
        if os.fork() == 0:
            os.write(write, str(run_isolated(os.getpid)).encode())
            os._exit(0)
        os.wait()
        print(before, os.read(read, 64).decode(), run_isolated(os.getpid))
    """)
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    before, in_fork, after = done.stdout.split()
    assert in_fork != before and after == before, done.stderr
