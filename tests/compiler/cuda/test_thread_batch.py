"""Consecutive independent thread kernels in one launch (compiler/gpu/thread_batch.py): a prefill layer's key RoPE
and copy of its values into the cache's layout are one "threads" launch, and so is each layer's pair of
concatenations in a decode step; a kernel that reads another's output, or runs over another shape, keeps its
launch; the memory plan keeps what a merged launch touches apart; through the host shim (blocks in either order,
at a bucket's grid) every output is what the reference interpreter computes."""

import numpy as np
import pytest

import luminal as lm
from luminal import dtypes as dt
from luminal.compiler.analysis import memory
from luminal.compiler.cuda.program import launched_together, planned_launches
from luminal.compiler.gpu.launch import Launch
from luminal.compiler.gpu.thread_batch import merge_threads
from luminal.compiler.kernels import ir
from luminal.nn.models.generation import decoder_graphs
from luminal.nn.models.llama import LlamaConfig, LlamaForCausalLM
from luminal.runtime.cuda.shim import ShimRuntime
from luminal.symbolic import as_expr, var
from tests.compiler.cuda import nvcc
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random

LAYERS = 3


def _copies() -> lm.Graph:
    """Three transposed copies of three inputs, each an output."""
    g = lm.Graph()
    n = lm.sym("n", max=40)
    for j in range(3):
        (g.input(f"x{j}", (n, 6)) * (j + 1)).permute(1, 0).output(f"y{j}")
    return g


def _feed(rows: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {f"x{j}": rng.standard_normal((rows, 6)).astype(np.float32) for j in range(3)}


def _shapes(program) -> list[tuple[str, int]]:
    return [(launch.shape, len(members)) for members, launch in planned_launches(program.kernels)]


def test_independent_copies_are_one_launch():
    program = lm.compile(_copies(), "h100", cache=False)
    assert [s for s in _shapes(program) if s[0] in ("thread", "threads")] == [("threads", 3)]


def _program(reads: dict[str, str], shapes: dict[str, int]) -> ir.KernelProgram:
    """Kernels k0.. in order, each writing output buffer `out` from `reads[out]` at its own element."""
    p = ir.KernelProgram()
    for name in {*reads, *reads.values()}:
        role = "output" if name in reads else "input"
        p.buffers[name] = ir.Buffer(name, dt.float32, as_expr(max(shapes.values())), role)
    for j, (out, source) in enumerate(reads.items()):
        i = var("_i0", 0, shapes[out] - 1)
        body = ir.Apply("Mul", (ir.Load(source, i, dt.float32), ir.Const(2.0, dt.float32)), dt.float32)
        p.kernels.append(ir.LoopKernel(f"k{j}", out, (as_expr(shapes[out]),), body))
        p.outputs[out] = (out, (as_expr(shapes[out]),))
    return p


def _merged(p: ir.KernelProgram) -> list[str]:
    plan = [((k,), Launch(k.name, "thread", as_expr(1), 256, (k.out, *ir.buffers_in_order(k)))) for k in p.kernels]
    return [launch.shape for _, launch in merge_threads(plan)]


def test_only_independent_kernels_of_one_shape_merge():
    assert _merged(_program({"A": "x", "B": "y", "C": "z"}, {"A": 8, "B": 8, "C": 8})) == ["threads"]
    reads_a = _program({"A": "x", "B": "A", "C": "z"}, {"A": 8, "B": 8, "C": 8})  # B must wait for A
    assert _merged(reads_a) == ["thread", "threads"]
    longer = _program({"A": "x", "B": "y"}, {"A": 8, "B": 5})
    assert _merged(longer) == ["thread", "thread"]


@pytest.mark.needs("g++")
@pytest.mark.parametrize("reversed_blocks", [False, True])
def test_merged_copies_match_the_reference(reversed_blocks):
    g = _copies()
    program = lm.compile(g, "h100", cache=False)
    runtime = ShimRuntime(reversed_blocks=reversed_blocks).load(program)
    for rows in (1, 33):
        assert_matches(runtime.run(_feed(rows)), lm.run(g, _feed(rows)))


@pytest.fixture(scope="module")
def llama():
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS,
                         num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
    return decoder_graphs(LlamaForCausalLM(config), max_batch=1, max_positions=32)


def test_a_prefill_copies_each_layers_values_beside_its_keys_and_a_decode_step_concatenates_each_layer_in_one(llama):
    prefill = _shapes(lm.compile(bind_random(llama.prefill), "h100", cache=False))
    assert prefill.count(("threads", 2)) == LAYERS  # the key's RoPE and the value's copy (compiler/gpu/copy_order.py)
    step = _shapes(lm.compile(bind_random(llama.step), "h100", cache=False))
    assert step.count(("threads", 2)) == LAYERS and ("thread", 1) not in step


@pytest.mark.needs("nvcc")
def test_compiles_without_spills():
    for u in nvcc.compile_cuda(lm.compile(_copies(), "h100", cache=False).source):
        assert u.spill_bytes == 0, f"{u.kernel} spills {u.spill_bytes} bytes on sm_{u.arch}"


def _overlapping(program, env, together) -> list[tuple[str, str]]:
    """Pairs of buffers one merged launch touches whose bytes overlap in the memory plan made with `together`."""
    plan = memory.plan(program, env, together)
    found = []
    for names in launched_together(program):
        kernels = [k for k in program.kernels if k.name in names]
        touched = sorted({b for k in kernels for b in ir.buffers_read(k) | {k.out}} & plan.offsets.keys())
        spans = {b: (plan.offsets[b], plan.offsets[b] + plan.sizes[b]) for b in touched}
        for j, a in enumerate(touched):
            found += [(a, b) for b in touched[j + 1 :] if spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]]
    return found


def test_the_memory_plan_keeps_what_a_merged_launch_touches_apart(llama):
    """A decode step's key and value concatenations read what dies with them: planned by kernel order alone, one's
    output takes the memory of what the other reads, which threads running both in any order race on."""
    program = lm.compile(bind_random(llama.step), "h100", cache=False).kernels
    env = {"batch": 1, "past": 7}
    assert _overlapping(program, env, ()) != []
    assert _overlapping(program, env, launched_together(program)) == []
