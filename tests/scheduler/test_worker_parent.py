"""A local worker process stops once the gateway that started it has died (it was reparented), as on SIGTERM;
while its parent lives it keeps serving. The end-to-end case (a SIGKILLed gateway's workers exit) is in
tests/scaleout/test_scaleout_kills.py."""

from __future__ import annotations

import os
import threading

from luminal.scheduler.worker_process import stop_with_parent


def test_a_worker_whose_parent_is_another_process_stops():
    stop = threading.Event()
    watcher = stop_with_parent(stop, parent_pid=os.getppid() + 1, poll_s=0.01)  # not our parent: it "died"
    assert stop.wait(30)
    watcher.join(timeout=30)
    assert not watcher.is_alive()


def test_a_worker_whose_parent_lives_keeps_serving_until_stopped():
    stop = threading.Event()
    watcher = stop_with_parent(stop, parent_pid=os.getppid(), poll_s=0.01)
    assert not stop.wait(0.3)  # thirty polls
    stop.set()  # a SIGTERM: the watch ends with the worker
    watcher.join(timeout=30)
    assert not watcher.is_alive()
