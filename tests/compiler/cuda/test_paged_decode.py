"""The paged decode step (KV block pools read through block tables, luminal/nn/models/paged_decoding.py) compiled
for h100: the attention reads the pools where they lie (no concatenation kernel, no cache-sized buffer), the
pools' scatters write in place, and through the host shim it computes what the reference interpreter does; with a
sliding window on a layer too, and with Qwen3's q/k norms."""

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal.compiler.cuda.program import launch_plan
from luminal.compiler.kernels import ir
from luminal.nn.models.llama import LlamaForCausalLM
from luminal.nn.models.paged_decoding import DEFAULT_BLOCK_SIZE, paged_step_graph, pool_name
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda import nvcc
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random
from tests.compiler.cuda.test_decode import CONFIG, LAYERS

POOL_BLOCKS = 64


# Full attention, and Qwen2's mix: layer 0 full, layer 1 through a window of 100 keys (shorter than the 300-key
# row below, and starting inside a block), measured by position; and Qwen3's per-head q/k norms before the
# rotation, which leave the attention reading the pools as it does without them.
CONFIGS = {
    "full": CONFIG,
    "windowed": replace(CONFIG, windows=(None, 100)),
    "qk_norm": replace(CONFIG, qk_norm=True),
}


@pytest.fixture(scope="module", params=CONFIGS)
def step(request):
    # up to 2048 positions: the attention runs as flash decoding
    graph = bind_random(paged_step_graph(LlamaForCausalLM(CONFIGS[request.param]), max_batch=4, max_positions=2048))
    return graph, lm.compile(graph, "h100", cache=False)


def _feed(lengths: list[int]) -> dict[str, np.ndarray]:
    """Rows of the given lengths, each row's blocks scattered over the pool in a shuffled order."""
    rng = np.random.default_rng(sum(lengths))
    row_blocks = max(n // DEFAULT_BLOCK_SIZE + 1 for n in lengths)
    order = rng.permutation(POOL_BLOCKS)[: len(lengths) * row_blocks]
    table = order.reshape(len(lengths), row_blocks).astype(np.int64)
    lengths_ = np.array(lengths, np.int64).reshape(-1, 1)
    slots = np.take_along_axis(table, lengths_ // DEFAULT_BLOCK_SIZE, 1) * DEFAULT_BLOCK_SIZE
    feed = {"input_ids": rng.integers(0, 96, (len(lengths), 1)), "position_ids": lengths_, "block_table": table}
    feed["slots"] = slots + lengths_ % DEFAULT_BLOCK_SIZE
    for k in range(LAYERS):
        for part in ("key", "value"):
            pool = rng.standard_normal((POOL_BLOCKS, 2, DEFAULT_BLOCK_SIZE, 16))
            feed[pool_name(k, part)] = pool.astype(ml_dtypes.bfloat16)
    return feed


def test_the_attention_reads_the_pools_through_the_block_table(step):
    """Per layer no kernel builds the [batch, kv_heads, past + 1, dim] caches: the flash-decoding attention
    loads the pools (gathered by the block table) and the step's own key and value projections itself."""
    _, program = step
    kernels = program.kernels
    attention = [k for k in kernels.kernels if isinstance(k, ir.LoopKernel) and isinstance(k.body, ir.Attend)]
    pools = {kernels.inputs[pool_name(k, part)] for k in range(LAYERS) for part in ("key", "value")}
    assert len(attention) == LAYERS
    for k in attention:
        gathered = {n.buffer for n in ir.walk(k.body.k) if isinstance(n, ir.GatherLoad)}
        gathered |= {n.buffer for n in ir.walk(k.body.v) if isinstance(n, ir.GatherLoad)}
        assert len(gathered & pools) == 2
    env = {"batch": 1, "row_blocks": 8, "pool_blocks": POOL_BLOCKS}
    cache = 2 * (8 * DEFAULT_BLOCK_SIZE + 1) * 16  # one row's [kv_heads, past + 1, dim]
    temps = [b for b in kernels.buffers.values() if b.role == "temp" and not b.name.endswith("_partials")]
    assert all(b.size.evaluate(env) < cache for b in temps)  # the mask's rows are the largest left
    shapes = [launch.shape for launch in launch_plan(kernels)]
    assert "copy" not in shapes  # the pools written in place
    # no concatenation is launched, nor the position as a float, the mask's rows or the scatters' indices: their
    # readers compute them (compiler/fusion/fuse_index.py)
    assert shapes.count("thread") == 0
    assert not [k.name for k in kernels.kernels if len(k.shape) == 4 and str(k.shape[2]) == "16*row_blocks + 1"]


def test_launches_a_kernel_per_attention_and_one_for_all_the_pools_scatters(step):
    """The launch count: each layer's attention is one launch (its last key block to finish combines,
    compiler/cuda/arrivals.py), the layers' 2 x LAYERS pool scatters are one (compiler/gpu/scatter_batch.py),
    each layer's q, k and v projections are one (compiler/gpu/gemv_batch.py; in the first layer too: the
    position's kernels, lowered between its q and k, run before them, compiler/gpu/gemv_order.py) and so are its
    gate and up projections (the up's blocks run the gate's first), every other kernel one launch."""
    _, program = step
    kernels = program.kernels
    plan = launch_plan(kernels)
    shapes = [launch.shape for launch in plan]
    assert shapes.count("flash_decode") == LAYERS and not {"attention_split", "combine", "scatter"} & set(shapes)
    (scatters,) = [launch for launch in plan if launch.shape == "scatters"]
    pools = {kernels.inputs[pool_name(k, part)] for k in range(LAYERS) for part in ("key", "value")}
    assert scatters.writes == 2 * LAYERS and set(scatters.buffers[: 2 * LAYERS]) == pools
    gemvs = [launch for launch in plan if launch.shape == "gemvs"]
    assert [launch.writes for launch in gemvs] == [3, 2] * LAYERS  # and gate then up in its blocks
    assert len(plan) == len(kernels.kernels) - (2 * LAYERS - 1) - sum(launch.writes - 1 for launch in gemvs)


def test_no_kernel_names_two_reductions_alike(step):
    """Inlining the projections into the attentions and scatters renames their reductions with fresh numbers
    (compiler/kernels/reduction_names.py): within a kernel no two different reductions share a variable. One reduction
    read in two places is one value (Qwen3's q norm, read at a feature and at its rotary partner), counted once."""
    _, program = step
    for k in program.kernels.kernels:
        values = [k.body] if isinstance(k, ir.LoopKernel) else [k.dest, k.at, k.src]
        reductions = {n for v in values for n in ir.walk(v) if isinstance(n, (ir.Reduce, ir.Contract))}
        names = [n.var for n in reductions]
        names += [x for v in values for n in ir.walk(v) if isinstance(n, ir.Attend) for x in (n.s_var, n.e_var)]
        assert len(names) == len(set(names)), f"{k.name}: {sorted(names)}"


@pytest.mark.needs("g++")
@pytest.mark.parametrize("lengths", [[1], [300, 17, 40]], ids=["one", "three_rows_two_key_blocks"])
def test_matches_the_reference(step, lengths):
    graph, program = step
    feed = _feed(lengths)
    want = lm.run(graph, {name: value.copy() for name, value in feed.items()})
    got = ShimRuntime().load(program).run(feed)
    assert_matches(got, want)
    assert got[pool_name(0, "key")] is feed[pool_name(0, "key")]  # written where the caller holds it


@pytest.mark.needs("nvcc")
def test_compiles_for_sm80_and_sm90_without_spills(step):
    _, program = step
    usages = nvcc.compile_cuda(program.source)
    assert {u.arch for u in usages} == {"80", "90"}
    for u in usages:
        assert u.spill_bytes == 0, f"{u.kernel} spills {u.spill_bytes} bytes on sm_{u.arch}"
        assert u.registers <= 255 and u.shared_bytes <= 48 * 1024
