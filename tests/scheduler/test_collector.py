"""A serving process's collector (scheduler/collector.py), settled in a fresh interpreter: the collector's state
is process-wide, and this test process must keep the default."""

import json
import subprocess
import sys

SETTLE = """
import gc, json, weakref
from luminal.scheduler.collector import SERVING_THRESHOLD, settle_serving_process

class Node:
    pass

gc.disable()  # from here only the settling collects
garbage, kept = Node(), Node()
garbage.me, kept.me = garbage, kept  # two cycles: one unreachable once deleted, one still held
dead = weakref.ref(garbage)
del garbage
young_before = gc.get_threshold()[0]
settle_serving_process()
frozen = gc.get_freeze_count()
gc.enable()
print(json.dumps({"freed": dead() is None, "frozen": frozen, "kept_frozen": kept not in gc.get_objects(),
                  "threshold": gc.get_threshold(), "young_before": young_before, "wanted": SERVING_THRESHOLD}))
"""


def test_settling_frees_garbage_freezes_the_rest_and_raises_the_young_threshold():
    done = subprocess.run([sys.executable, "-c", SETTLE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["freed"]  # a cycle that was garbage before settling is collected, not frozen
    assert seen["frozen"] > 1000 and seen["kept_frozen"]  # what lives (modules, the kept cycle) is frozen
    assert seen["threshold"][0] == seen["wanted"] > seen["young_before"]


def test_this_process_keeps_the_default_collector():
    import gc

    assert gc.get_freeze_count() == 0 and gc.get_threshold()[0] == 700
