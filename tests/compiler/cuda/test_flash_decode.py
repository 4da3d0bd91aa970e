"""Flash decoding (compiler/analysis/attention_plan.py's `splits`, compiler/gpu/flash_decode.py): an attention of single
queries over a key axis that may be long runs as key blocks whose last to finish per row combines them (one
launch, compiler/cuda/arrivals.py), and computes through the host shim what the reference interpreter computes,
at an exact launch, at a shape bucket's grid, with the blocks run last first, and run after run."""

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.compiler.analysis import attention_plan, memory
from luminal.compiler.artifact import load_program, save_program
from luminal.compiler.cuda import arrivals
from luminal.compiler.cuda.program import launch_plan
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda import nvcc
from tests.compiler.cuda.compare import assert_matches

needs_gxx = pytest.mark.needs("g++")


def decode_attention(max_keys: int) -> lm.Graph:
    """One query per head against `keys` cached keys, a padding mask as the bias (the safe softmax)."""
    g, keys = lm.Graph(), lm.sym("keys", max=max_keys)
    q = g.input("q", (1, 2, 1, 16))
    k, v = g.input("k", (1, 2, keys, 16)), g.input("v", (1, 2, keys, 16))
    mask = g.input("mask", (1, 1, 1, keys), dtype=lm.bool_)
    F.scaled_dot_product_attention(q, k, v, attn_mask=mask).output("out")
    return g


def feed(keys: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(keys)
    out = {name: rng.standard_normal((1, 2, 1 if name == "q" else keys, 16)).astype(np.float32) for name in "qkv"}
    mask = np.ones((1, 1, 1, keys), bool)
    mask[..., keys // 3] = False  # a hidden key
    return out | {"mask": mask}


@pytest.fixture(scope="module")
def long():
    g = decode_attention(2048)
    return g, lm.compile(g, "h100", cache=False)


def test_a_long_key_axis_splits_and_a_short_one_does_not(long):
    _, program = long
    assert [launch.shape for launch in launch_plan(program.kernels)] == ["flash_decode"]  # the combine folded in
    (attend,) = [k for k in program.kernels.kernels if attention_plan.splits(k) is not None]
    counters = program.kernels.buffers[arrivals.arrivals(attend)]
    assert (counters.role, counters.dtype, counters.size) == (arrivals.ROLE, lm.int32, 2)  # a counter per head
    scratch = program.kernels.buffers[attention_plan.partials(attend)]
    assert scratch.role == "temp" and scratch.label == attend.name
    at = program.kernels.kernels.index(attend)  # the scratch is live at its kernel only
    assert memory.lifetimes(program.kernels)[scratch.name] == memory.Lifetime(at, at)
    short = lm.compile(decode_attention(64), "h100", cache=False)
    assert "attention_split" not in {launch.shape for launch in launch_plan(short.kernels)}


def test_an_artifact_keeps_the_counters_and_the_one_launch(long, tmp_path):
    _, program = long
    save_program(program, tmp_path / "flash.lprog")
    back = load_program(tmp_path / "flash.lprog")
    (name,) = [b.name for b in back.kernels.buffers.values() if b.role == arrivals.ROLE]
    assert back.kernels.buffers[name] == program.kernels.buffers[name]
    assert launch_plan(back.kernels) == launch_plan(program.kernels)


@needs_gxx
@pytest.mark.parametrize("keys", [1, 255, 256, 700])  # one block, a block's edge, three blocks with a partial one
def test_matches_the_reference(long, keys):
    g, program = long
    assert_matches(ShimRuntime().load(program).run(feed(keys)), lm.run(g, feed(keys)))


@needs_gxx
def test_the_last_block_to_arrive_combines_whatever_the_order_and_resets_the_counters(long):
    """Blocks run last first (the first of a row arrives last), then run after run on one executable: each run
    starts from counters the last one reset (as a CUDA graph replays)."""
    g, program = long
    for order in (False, True):
        run = ShimRuntime(reversed_blocks=order).load(program)
        for keys in (300, 700, 1, 700):  # each run finds the last one's partials in its slots
            assert_matches(run.run(feed(keys)), lm.run(g, feed(keys)))
        (counters,) = [a for name, a in run.fixed.items() if name.endswith("_arrivals")]
        assert counters.dtype == np.int32 and not counters.any()


@needs_gxx
def test_at_a_buckets_grid_matches_the_reference(long):
    g, program = long
    assert_matches(ShimRuntime(buckets=True).load(program).run(feed(300)), lm.run(g, feed(300)))


@pytest.mark.needs("nvcc")
def test_compiles_without_spills(long):
    _, program = long
    for u in nvcc.compile_cuda(program.source):
        assert u.spill_bytes == 0, f"{u.kernel} spills {u.spill_bytes} bytes on sm_{u.arch}"
