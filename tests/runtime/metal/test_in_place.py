"""Donated inputs on the Metal runtime, run through the stand-in Metal module (fake_metal.py, the dispatches run by
the Metal shim): a pool given as a MetalArray is bound where the caller holds it (no copy into the arena, no copy
launch), the scatter writes it there and the same MetalArray comes back; a numpy pool is copied in and left
alone; the paged decode step's pools are written by two steps that equal the reference interpreter's."""

import numpy as np
import pytest

import luminal as lm
from luminal.runtime import metal as metal_runtime
from luminal.runtime.metal.arrays import MetalArray
from luminal.runtime.reference import ExecutionError
from tests.compiler.metal.models import paged_feed, paged_step
from tests.compiler.test_in_place_scatter import SECOND_SRC, _expected, _expected_twice, _feed, _pool_graph
from tests.runtime.metal import fake_metal

pytestmark = pytest.mark.needs("g++")


def _load(graph: lm.Graph):
    program = lm.compile(graph, "m2")
    fake_metal.use(program)
    return metal_runtime.MetalRuntime().load(program, api=fake_metal)


def test_a_metal_pool_is_written_where_the_caller_holds_it():
    exe = _load(_pool_graph())
    assert exe.in_place == {exe.program.inputs["pool"]: "pool"}
    feed = _feed()
    pool = exe.array(feed["pool"])
    out = exe.run({**feed, "pool": pool})
    assert out["pool"] is pool  # the caller's own array, written in place
    np.testing.assert_array_equal(pool.numpy(), _expected(feed["pool"]))
    np.testing.assert_array_equal(out["row_sums"], feed["pool"].sum(1))  # read before the write
    (commands,) = fake_metal.current.command_buffers
    (encoder,) = commands.encoders
    names = [d.pipeline.function.name for d in encoder.dispatches]
    assert not any(name.endswith("_copy") for name in names)
    for dispatch in encoder.dispatches:  # every kernel reading or writing the pool is given the caller's buffer
        launch = next(launch for launch in exe.plan if launch.kernel == dispatch.pipeline.function.name)
        for slot, name in enumerate(launch.buffers):
            if name == exe.program.inputs["pool"]:
                assert dispatch.bindings[slot] == (pool.buffer, 0)
    # as the engine does: the returned pool goes back in; the second scatter lands on the first's result
    again = exe.run({**feed, "pool": pool, "src": SECOND_SRC})
    assert again["pool"] is pool
    np.testing.assert_array_equal(pool.numpy(), _expected_twice(feed["pool"]))


def test_a_numpy_pool_is_copied_in_and_left_alone():
    exe = _load(_pool_graph())
    exe.run({**_feed(), "pool": exe.array(_feed()["pool"])})  # a bound pool first, then a host one
    feed = _feed()
    old = feed["pool"].copy()
    out = exe.run(feed)
    np.testing.assert_array_equal(feed["pool"], old)
    np.testing.assert_array_equal(out["pool"], _expected(old))
    assert isinstance(out["pool"], np.ndarray) and out["pool"] is not feed["pool"]


def test_a_metal_pool_of_the_wrong_type_or_size_is_refused_by_name():
    exe = _load(_pool_graph())
    feed = _feed()
    with pytest.raises(ExecutionError, match="input 'pool' must be float32, got int32"):
        exe.run({**feed, "pool": exe.array(feed["pool"].astype(np.int32))})
    short = exe.array(feed["pool"][:2])
    with pytest.raises(ValueError, match=r"needs 128 bytes; its buffer has 32"):
        MetalArray(short.buffer, (8, 4), lm.float32)


def test_two_paged_decode_steps_write_the_metal_pools_and_equal_the_reference():
    graph = paged_step()
    exe = _load(graph)
    host = paged_feed(graph, [1, 5])
    pools = {name: exe.array(value) for name, value in host.items() if name.startswith("pool.")}
    for _ in range(2):
        want = lm.run(graph, {name: value.copy() for name, value in host.items()})
        got = exe.run({**host, **pools})
        assert all(got[name] is pools[name] for name in pools)
        for name, value in want.items():
            mine = got[name].numpy() if name in pools else got[name]
            np.testing.assert_array_equal(mine.astype(np.float32), value.astype(np.float32), err_msg=name)
        host |= {name: want[name] for name in pools}  # the reference's pools, one token further
        host["position_ids"], host["slots"] = host["position_ids"] + 1, host["slots"] + 1
