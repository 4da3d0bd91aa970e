"""Donated inputs on the CUDA runtime, run through the CuPy stand-in and the host shim: a scatter into a donated
pool has no copy kernel, a device pool is bound where the caller holds it and written there (the same array
comes back), the graph is captured again only when the pool's pointer changes, and a host pool is copied in."""

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal.hl import prim
from luminal.runtime.cuda.layout import launches_at
from tests.compiler.test_in_place_scatter import SECOND_SRC, _expected, _expected_twice, _feed, _pool_graph
from tests.runtime.cuda import fake_cupy
from tests.runtime.cuda.test_fake_device import load

pytestmark = [
    pytest.mark.needs("g++"),
    pytest.mark.usefixtures("fake_cublas_library"),
]


def _device_feed():
    feed = _feed()
    return feed, {**feed, "pool": fake_cupy.asarray(feed["pool"])}


def test_the_scatter_into_a_donated_pool_has_no_copy_launch():
    exe = load(_pool_graph())
    assert [launch.shape for launch in exe.plan if launch.shape in ("copy", "scatter")] == ["scatter"]
    assert exe.in_place == {exe.program.inputs["pool"]: "pool"}
    undonated = load(_pool_graph(donate=False))
    assert [launch.shape for launch in undonated.plan if launch.shape in ("copy", "scatter")] == ["copy", "scatter"]


@pytest.mark.parametrize("graph", [True, False], ids=["graph", "launches"])
def test_a_device_pool_is_written_where_the_caller_holds_it(graph):
    exe = load(_pool_graph())
    feed, on_device = _device_feed()
    pool = on_device["pool"]
    out = exe.run(on_device, device_outputs=True, graph=graph)
    assert out["pool"] is pool  # the caller's own array, written in place
    np.testing.assert_array_equal(pool.get(), _expected(feed["pool"]))
    np.testing.assert_array_equal(out["row_sums"].get(), feed["pool"].sum(1))  # read before the write
    arena = exe.arena({"n": 8})
    assert arena.pointers[exe.program.inputs["pool"]].ptr == pool.data.ptr
    # as the engine does: the returned pool goes back in; the second scatter lands on the first's result
    again = exe.run({**on_device, "src": SECOND_SRC}, device_outputs=True, graph=graph)
    assert again["pool"] is pool
    np.testing.assert_array_equal(pool.get(), _expected_twice(feed["pool"]))


def test_the_graph_is_captured_again_only_when_the_pool_moves():
    exe = load(_pool_graph())
    feed, on_device = _device_feed()
    exe.run(on_device, device_outputs=True)
    arena = exe.arena({"n": 8})
    first = arena.graph
    exe.run(on_device, device_outputs=True)
    assert arena.graph is first and first.launches == 1  # same pool, same pointers: replayed (the first run eager)
    other = fake_cupy.asarray(feed["pool"] * 2)
    before = fake_cupy.Function.launched
    out = exe.run({**on_device, "pool": other}, device_outputs=True)
    assert out["pool"] is other and arena.graph is not first
    assert fake_cupy.Function.launched - before == len(launches_at(exe.plan, arena.env))
    np.testing.assert_array_equal(other.get(), _expected(feed["pool"] * 2))
    np.testing.assert_array_equal(out["row_sums"].get(), (feed["pool"] * 2).sum(1))


def test_a_host_pool_is_copied_in_and_left_alone():
    exe = load(_pool_graph())
    feed, on_device = _device_feed()
    exe.run(on_device)  # the arena first bound to a device pool, then back to its own slot
    host = _feed()
    old = host["pool"].copy()
    out = exe.run(host)
    np.testing.assert_array_equal(host["pool"], old)
    np.testing.assert_array_equal(out["pool"], _expected(old))
    np.testing.assert_array_equal(out["row_sums"], old.sum(1))
    arena = exe.arena({"n": 8})
    assert arena.pointers[exe.program.inputs["pool"]].ptr == arena.own[exe.program.inputs["pool"]].ptr


def test_a_bfloat16_pool_held_as_its_bits_on_the_device_is_written_in_place():
    """CuPy 13 has no bfloat16: a bf16 pool lives on the device as uint16 bits, and binds as the bf16 input it is."""
    g = lm.Graph()
    pool = g.input("pool", (lm.sym("n", max=64), 4), lm.bfloat16)
    at, src = g.input("at", (3,), lm.int64), g.input("src", (3,), lm.bfloat16)
    prim.scatter(pool, at, src).output("pool")
    g.donate("pool", "pool")
    feed = {k: v.astype(ml_dtypes.bfloat16) if v.dtype == np.float32 else v for k, v in _feed().items()}
    bits = fake_cupy.asarray(feed["pool"].view(np.uint16))
    out = load(g).run({**feed, "pool": bits}, device_outputs=True)
    assert out["pool"] is bits
    np.testing.assert_array_equal(bits.get().view(ml_dtypes.bfloat16), _expected(feed["pool"].astype(np.float32)))


def test_a_donated_pool_that_is_not_contiguous_is_refused_by_name():
    exe = load(_pool_graph())
    _, on_device = _device_feed()

    class Strided(fake_cupy.ndarray):  # a view whose flat form is a copy elsewhere
        def reshape(self, *shape):
            return fake_cupy.ndarray._of(self.a.reshape(*shape))

    strided = Strided.__new__(Strided)
    strided.data, strided.a = on_device["pool"].data, on_device["pool"].a
    with pytest.raises(ValueError, match="'pool' must be a contiguous device array"):
        exe.run({**on_device, "pool": strided})


def test_a_donated_pool_at_an_unaligned_address_is_refused_by_name():
    exe = load(_pool_graph())
    feed, on_device = _device_feed()
    flat = feed["pool"].reshape(-1)
    padded = fake_cupy.asarray(np.concatenate([flat[:1], flat]))
    shifted = fake_cupy.ndarray(feed["pool"].shape, flat.dtype, memptr=padded.data + flat.itemsize)
    with pytest.raises(ValueError, match="'pool' must start at a 16-byte aligned address"):
        exe.run({**on_device, "pool": shifted})


def test_two_paged_decode_steps_write_the_device_pools_and_match_the_reference():
    """The paged step as the engine runs it: pools on the device, each step's returned pools fed to the next;
    the attention reads them through the block table, the scatters write them, nothing copies them."""
    from luminal.nn.models.llama import LlamaForCausalLM
    from luminal.nn.models.paged_decoding import paged_step_graph
    from tests.compiler.cuda.compare import assert_matches
    from tests.compiler.cuda.graphs import bind_random
    from tests.compiler.cuda.test_decode import CONFIG
    from tests.compiler.cuda.test_paged_decode import _feed

    # float32: a device array's dtype binds the input, and CuPy 13 has no bfloat16
    g = bind_random(paged_step_graph(LlamaForCausalLM(replace(CONFIG, dtype=lm.float32)), 2, max_positions=64))
    exe = load(g)
    host = _feed([5, 20])
    pools = [name for name in host if name.startswith("pool.")]
    host |= {name: host[name].astype(np.float32) for name in pools}
    device = {name: fake_cupy.asarray(host[name]) for name in pools}
    for _ in range(2):
        feed = {**host, **device}
        want = lm.run(g, {name: value.copy() for name, value in host.items()})
        got = exe.run(feed, device_outputs=True)
        assert all(got[name] is device[name] for name in pools)  # the caller's arrays, written in place
        assert_matches({name: v.get() for name, v in got.items()}, want)
        host = {**host, **{name: want[name] for name in pools}}  # the next token, one position further
        host["position_ids"] = host["position_ids"] + 1
        host["slots"] = host["slots"] + 1
    assert (
        len(exe.arenas) == 1 and next(iter(exe.arenas.values())).graph.launches == 1
    )  # captured once, after the eager first step
