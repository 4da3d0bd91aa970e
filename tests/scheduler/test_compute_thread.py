"""One thread for a process's CPU programs (scheduler/compute_thread.py), and the loaded programs that use it."""

import threading

import pytest

from luminal.scheduler.compute_thread import ComputeThread
from luminal.scheduler.programs import LoadedProgram


def test_calls_from_many_threads_all_run_on_the_one_compute_thread():
    compute = ComputeThread(name="test-compute")
    seen, results = set(), []

    def job(i: int) -> int:
        seen.add(threading.current_thread().name)
        return i * i

    callers = [threading.Thread(target=lambda i=i: results.append(compute.call(job, i))) for i in range(8)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert seen == {"test-compute"}
    assert sorted(results) == [i * i for i in range(8)]


def test_an_exception_reaches_the_caller_and_the_thread_goes_on():
    compute = ComputeThread()

    def fails() -> None:
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        compute.call(fails)
    assert compute.call(len, "abc") == 3


def test_a_call_made_on_the_compute_thread_runs_at_once():
    compute = ComputeThread()
    names = compute.call(
        lambda: (threading.current_thread().name, compute.call(lambda: threading.current_thread().name))
    )
    assert names == ("cpu-programs", "cpu-programs")  # a nested call would wait for itself forever otherwise


class _Program:
    """Where a program was made ready and run."""

    def __init__(self, target: str):
        self.target, self.threads = target, []

    def prepare(self):
        self.threads.append(("prepare", threading.current_thread().name))
        return self

    def run(self, inputs):
        self.threads.append(("run", threading.current_thread().name))
        return {"y": inputs["x"]}


def test_a_cpu_program_is_made_ready_and_run_on_the_compute_thread():
    # Packing the weights is parallel C as well: a worker thread that did it would keep an OpenMP team.
    program = _Program("cpu")
    loaded = LoadedProgram(program, ComputeThread(name="programs"))
    assert loaded.run({"x": 1}) == {"y": 1}
    assert program.threads == [("prepare", "programs"), ("run", "programs")]


@pytest.mark.parametrize("compute", [None, ComputeThread()])
def test_a_gpu_program_or_one_without_a_compute_thread_runs_on_the_caller(compute):
    program = _Program("h100" if compute else "cpu")
    LoadedProgram(program, compute).run({"x": 1})
    here = threading.current_thread().name
    assert program.threads == [("prepare", here), ("run", here)]
