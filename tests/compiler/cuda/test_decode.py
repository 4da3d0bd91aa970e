"""A Llama decode step (bf16, grouped-query attention, RoPE, a KV cache) compiled for h100: what it launches, and
that it computes through the host shim what the reference interpreter computes."""

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal.compiler.analysis import gemv_plan
from luminal.compiler.analysis.gemm_plan import Accumulated
from luminal.compiler.cuda.program import launch_plan, planned_launches
from luminal.compiler.gpu.launch import loop_shape
from luminal.compiler.kernels import ir
from luminal.nn.models.generation import decoder_graphs
from luminal.nn.models.llama import LlamaConfig, LlamaForCausalLM
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda import nvcc
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random

LAYERS = 2  # the second layer's norms read the residual sums the first layer's GEMVs store
CONFIG = LlamaConfig(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=LAYERS,
    num_attention_heads=4,
    num_key_value_heads=2,
    dtype=lm.bfloat16,
)


def _compiled(config: LlamaConfig):
    # past may reach 2047: the attention runs as flash decoding
    graph = decoder_graphs(LlamaForCausalLM(config), max_batch=1, max_positions=2048).step
    graph = bind_random(graph)
    return graph, lm.compile(graph, "h100", cache=False)


@pytest.fixture(scope="module")
def step():
    return _compiled(CONFIG)


@pytest.fixture(scope="module")
def step_f32():
    return _compiled(replace(CONFIG, dtype=lm.float32))


def _feed(past: int, dtype=ml_dtypes.bfloat16) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(past)
    feed = {"input_ids": np.array([[7]]), "position_ids": np.array([[past]])}
    feed["attention_mask"] = np.ones((1, past + 1), np.int64)
    for k in range(LAYERS):
        for part in ("key", "value"):
            feed[f"past.{k}.{part}"] = rng.standard_normal((1, 2, past, 16)).astype(dtype)
    return feed


def test_a_layer_launches_its_linears_as_gemvs_and_fuses_the_key_value_casts(step):
    """Per layer: seven GEMVs (q, k, v, o, gate, up, down) computing the two norms in their prologues, the key
    and value caches' concatenations (outputs of the step) and a flash-decoding attention that computes q's RoPE
    and reads the bf16 caches in place (no float32 copy of them), its last key block combining (one launch)."""
    _, program = step
    plan = launch_plan(program.kernels)
    shapes = [launch.shape for launch in plan]
    gemvs = sum(launch.writes for launch in plan if launch.shape == "gemvs")  # compiler/gpu/gemv_batch.py
    assert shapes.count("gemv") + gemvs == 7 * LAYERS + 1  # and the logits
    # q, k and v (v runs before the key cache's concatenation, which reads k: compiler/gpu/gemv_order.py), then
    # gate and up
    assert [launch.writes for launch in plan if launch.shape == "gemvs"] == [3, 2] * LAYERS
    assert shapes.count("flash_decode") == LAYERS and "combine" not in shapes and "attention_split" not in shapes
    assert shapes.count("row") == 0  # every norm is in the prologue of the GEMVs that read it
    # RoPE's tables and the causal mask are computed where they are read (compiler/fusion/fuse_index.py); left: each
    # layer's two cache concatenations, one launch (compiler/gpu/thread_batch.py).
    assert shapes.count("threads") == LAYERS and "thread" not in shapes
    assert [launch.writes for launch in plan if launch.shape == "threads"] == [2] * LAYERS
    assert "warp" not in shapes and "gemm" not in shapes and "attention" not in shapes
    buffers = program.kernels.buffers
    for launch in plan:
        if launch.shape == "flash_decode":
            assert [buffers[b].dtype for b in launch.buffers].count(lm.bfloat16) >= 2  # the key and value caches


def _gemvs(program) -> list:
    return [k for k in program.kernels.kernels if loop_shape(k) == "gemv"]


@pytest.mark.parametrize("fixture", ["step", "step_f32"])
def test_the_norms_are_in_the_gemv_prologues_and_the_residual_sums_in_their_epilogues(fixture, request):
    """q, k, v, gate, up and the logits compute their RMSNorm's statistics (compiler/gpu/norm_prologue.py);
    o_proj and down_proj store the residual sum (compiler/fusion/fuse_residual.py), which the next norms read alone:
    no GEMV reads more than the residual, the norm's weight, its own weight and (down_proj) its vector."""
    _, program = request.getfixturevalue(fixture)
    gemvs = _gemvs(program)
    assert sum(gemv_plan.plan(k).statistics for k in gemvs) == 5 * LAYERS + 1
    assert all(len(ir.buffers_read(k)) <= 4 for k in gemvs if gemv_plan.plan(k).statistics)
    assert sum(_adds_to_the_sum(gemv_plan.plan(k).epilogue) for k in gemvs) == 2 * LAYERS


def _adds_to_the_sum(v) -> bool:
    """Whether an element-wise Add of the GEMV's own sum (a residual) is in its epilogue."""
    if not isinstance(v, ir.Apply):
        return False
    if v.op == "Add" and any(isinstance(n, Accumulated) for a in v.args for n in ir.walk(a)):
        return True
    return any(_adds_to_the_sum(a) for a in v.args)


@pytest.mark.needs("g++")
@pytest.mark.parametrize("past", [1, 300])  # one key block, two
def test_matches_the_reference(step, past):
    graph, program = step
    feed = {name: value for name, value in _feed(past).items() if name in graph.inputs}
    assert_matches(ShimRuntime().load(program).run(feed), lm.run(graph, feed))


@pytest.mark.needs("g++")
def test_the_float32_step_matches_the_reference(step_f32):
    graph, program = step_f32
    feed = {name: value for name, value in _feed(300, np.float32).items() if name in graph.inputs}
    assert_matches(ShimRuntime().load(program).run(feed), lm.run(graph, feed))


@pytest.mark.needs("nvcc")
def test_the_fused_gemvs_compile_for_sm80_and_sm90_without_spills(step):
    """The GEMVs with a norm in their prologue (a block fold before the staging) or a residual in their
    epilogue, like every other kernel of the step, compile and keep everything in registers."""
    _, program = step
    launch_of = {m.name: launch.kernel for members, launch in planned_launches(program.kernels) for m in members}
    fused = {launch_of[k.name] for k in _gemvs(program) if gemv_plan.plan(k).statistics}
    usages = nvcc.compile_cuda(program.source)
    assert fused <= {u.kernel for u in usages if u.arch == "80"} & {u.kernel for u in usages if u.arch == "90"}
    for u in usages:
        assert u.spill_bytes == 0, f"{u.kernel} spills {u.spill_bytes} bytes on sm_{u.arch}"
        assert u.registers <= 255 and u.shared_bytes <= 48 * 1024
