"""Flash decoding's arrival counters in the CUDA runtime (compiler/cuda/arrivals.py), on the fake device: zeroed
at load beside the weights, left at zero by every run, so replays of one captured graph at other key counts
compute what the reference interpreter does."""

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.cuda import arrivals
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.test_flash_decode import decode_attention, feed
from tests.runtime.cuda.test_fake_device import load

pytestmark = pytest.mark.needs("g++")


@pytest.mark.parametrize("graph", [True, False], ids=["graph", "launches"])
def test_runs_at_other_key_counts_start_from_reset_counters(graph):
    g = decode_attention(2048)
    exe = load(g, graphs=graph)
    (name,) = [b.name for b in exe.program.buffers.values() if b.role == arrivals.ROLE]
    counters = exe.weights[name]
    assert counters.dtype == np.int32 and counters.size == 2
    for keys in (300, 700, 520, 700):  # 520 and 700: one bucket (1024), its graph replayed
        assert_matches(exe.run(feed(keys)), lm.run(g, feed(keys)))
        assert not np.asarray(counters.get()).any()
