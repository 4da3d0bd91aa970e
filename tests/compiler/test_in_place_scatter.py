"""Donated inputs: a scatter into an input the graph donates to its output writes the caller's array in place, in
the reference interpreter, in the compiled CPU program and in the compiled CUDA and Metal programs (run through
their host shims, which share the CPU runtime's I/O; the GPU runtimes' own binding is tests/runtime/cuda and
tests/runtime/metal), after every other reader of the old contents; a scatter that is not eligible copies, and
the caller's array is left alone."""

import numpy as np
import pytest

import luminal as lm
from luminal import functional as F
from luminal.compiler.kernels import ir
from luminal.graph import GraphError
from luminal.graph_json import decode_graph, encode_graph
from luminal.hl import prim
from luminal.runtime.cuda.shim import ShimRuntime
from luminal.runtime.metal.shim import MetalShimRuntime
from luminal.runtime.reference import execute
from luminal.view import ShapeError

RUNS = {
    "reference": lambda g, feed: execute(g, feed),
    "cpu": lambda g, feed: lm.compile(g, "cpu").run(feed),
    "cuda-shim": lambda g, feed: ShimRuntime().load(lm.compile(g, "h100")).run(feed),
    "metal-shim": lambda g, feed: MetalShimRuntime().load(lm.compile(g, "m2")).run(feed),
}


def _pool_graph(donate: bool = True, read_result: bool = False) -> lm.Graph:
    g = lm.Graph()
    n = lm.sym("n", max=64)
    pool = g.input("pool", (n, 4))
    at = g.input("at", (3,), lm.int64)
    src = g.input("src", (3,))
    F.sum(pool, 1).output("row_sums")  # reads the pool's contents before the write
    written = prim.scatter(pool, at, src)
    written.output("pool")
    if read_result:
        (written * 2).output("doubled")
    if donate:
        g.donate("pool", "pool")
    return g


def _feed():
    pool = np.arange(32, dtype=np.float32).reshape(8, 4)
    return {"pool": pool, "at": np.array([0, 5, 31]), "src": np.array([-1, -2, -3], np.float32)}


def _expected(pool: np.ndarray) -> np.ndarray:
    out = pool.copy().reshape(-1)
    out[[0, 5, 31]] = [-1, -2, -3]
    return out.reshape(8, 4)


SECOND_SRC = np.array([7, 8, 9], np.float32)  # a second run's values, scattered where _feed's went


def _expected_twice(pool: np.ndarray) -> np.ndarray:
    """`pool` after _feed's scatter and then a second one of SECOND_SRC: the second lands on the first's result."""
    out = _expected(pool).reshape(-1)
    out[[0, 5, 31]] = SECOND_SRC
    return out.reshape(8, 4)


@pytest.mark.parametrize("runtime", RUNS)
def test_a_donated_pool_is_written_in_place_after_its_readers(runtime):
    feed = _feed()
    old = feed["pool"].copy()
    out = RUNS[runtime](_pool_graph(), feed)
    assert out["pool"] is feed["pool"]  # the caller's array, handed back
    np.testing.assert_array_equal(feed["pool"], _expected(old))
    np.testing.assert_array_equal(out["row_sums"], old.sum(1))  # computed from the contents before the write


@pytest.mark.parametrize("runtime", RUNS)
def test_without_donation_or_with_another_reader_the_input_is_left_alone(runtime):
    for graph in (_pool_graph(donate=False), _pool_graph(read_result=True)):
        feed = _feed()
        old = feed["pool"].copy()
        out = RUNS[runtime](graph, feed)
        np.testing.assert_array_equal(feed["pool"], old)
        np.testing.assert_array_equal(out["pool"], _expected(old))


@pytest.mark.parametrize("runtime", RUNS)
def test_an_output_of_the_donated_input_itself_keeps_the_old_contents(runtime):
    g = _pool_graph()
    g.tensor("pool").output("old")
    feed = _feed()
    old = feed["pool"].copy()
    out = RUNS[runtime](g, feed)
    np.testing.assert_array_equal(out["old"], old)
    np.testing.assert_array_equal(out["pool"], _expected(old))


def test_a_read_only_donated_array_is_copied_not_written():
    feed = _feed()
    feed["pool"].flags.writeable = False
    for run in RUNS.values():
        out = run(_pool_graph(), feed)
        assert out["pool"] is not feed["pool"]
        np.testing.assert_array_equal(out["pool"], _expected(feed["pool"]))


def test_the_compiled_scatter_writes_the_input_buffer_with_no_copy_of_it():
    kernels = lm.compile(_pool_graph(), "cpu").kernels
    scatter = [k for k in kernels.kernels if isinstance(k, ir.ScatterKernel)]
    assert [k.out for k in scatter] == [kernels.inputs["pool"]]
    assert kernels.kernels[-1] is scatter[0]  # last: after the row sums read the old contents
    assert kernels.outputs["pool"][0] == kernels.inputs["pool"]
    planned = [b for b in kernels.buffers.values() if b.role in ("temp", "output")]
    assert planned and all(b.size.evaluate({"n": 8}) < 8 * 4 for b in planned)  # no pool-sized temp


def test_donation_survives_graph_json_and_bad_donations_are_refused():
    g = _pool_graph()
    assert decode_graph(encode_graph(g)).donated == {"pool": "pool"}
    assert "donated" not in encode_graph(_pool_graph(donate=False))  # files without donations are unchanged
    with pytest.raises(GraphError, match="needs an output"):
        g.donate("pool", "nope")
    with pytest.raises(ShapeError, match="differs"):
        g.donate("row_sums", "pool")
