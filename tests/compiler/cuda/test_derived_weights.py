"""A CUDA program's kernels over weights alone run once at load (compiler/kernels/derived_weights.py): a scaled weight
that cuBLAS reads, and a half weight copied transposed for the SIMT GEMM. They are in the load plan, not in a
run's; the source says so; through the host shim (`lm_prepare`, then runs in either block order and at a
bucket's grids) and through an artifact saved and read back, the outputs are the reference interpreter's."""

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.artifact import load_program, program_to_bytes
from luminal.compiler.cuda.program import launch_plan, load_plan
from luminal.compiler.kernels.derived_weights import ROLE
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda import nvcc
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random

ROWS = lm.sym("m", max=512)  # large enough that the GEMM is tiled, not a GEMV reading the weight in place


def scaled() -> lm.Graph:
    """x @ (2 w).T: the scaled weight is a kernel of its own (fusion computes nothing in a GEMM's operands)."""
    g = lm.Graph()
    x, w = g.input("x", (ROWS, 256)), g.weight("w", (512, 256))
    (x @ (w * 2.0).t()).output("y")
    return bind_random(g)


def widened() -> lm.Graph:
    """x @ w.float().T with w bf16: the SIMT GEMM reads a transposed half copy of w."""
    g = lm.Graph()
    x, w = g.input("x", (ROWS, 256)), g.weight("w", (512, 256), dtype=lm.bfloat16)
    (x @ w.float().t()).output("y")
    return bind_random(g)


GRAPHS = {"scaled": scaled, "widened": widened}


def feed(rows: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(rows).standard_normal((rows, 256)).astype(np.float32)}


@pytest.fixture(scope="module", params=sorted(GRAPHS))
def compiled(request):
    g = GRAPHS[request.param]()
    return g, lm.compile(g, "h100", cache=False)


def test_the_weight_kernel_runs_at_load_not_in_a_run(compiled):
    _, prog = compiled
    p = prog.kernels
    derived = [name for name, b in p.buffers.items() if b.role == ROLE]
    (once,) = load_plan(p)
    assert len(derived) == 1 and once.buffers[0] == derived[0] and once.shape == "thread"
    (run,) = launch_plan(p)  # the GEMM alone, reading what the load made
    assert run.shape in ("cublas", "gemm") and derived[0] in run.buffers
    assert f"/* {once.kernel}: thread," in prog.source and "once at load */" in prog.source


RUNTIMES = {"plain": {}, "reversed": {"reversed_blocks": True}, "bucketed": {"buckets": True}}


@pytest.mark.needs("g++")
@pytest.mark.parametrize("runtime", RUNTIMES.values(), ids=RUNTIMES.keys())
def test_matches_the_reference(compiled, runtime):
    g, prog = compiled
    loaded = ShimRuntime(**runtime).load(prog)
    for rows in (3, 70):
        assert_matches(loaded.run(feed(rows)), lm.run(g, feed(rows)))


@pytest.mark.needs("g++")
def test_an_artifact_keeps_the_derived_buffers(compiled):
    g, prog = compiled
    back = load_program(program_to_bytes(prog), target="h100")
    assert {n: b.role for n, b in back.kernels.buffers.items()} == {n: b.role for n, b in prog.kernels.buffers.items()}
    assert_matches(ShimRuntime().load(back).run(feed(5)), lm.run(g, feed(5)))


@pytest.mark.needs("nvcc")
def test_compiles_without_spills(compiled):
    for u in nvcc.compile_cuda(compiled[1].source):
        assert u.spill_bytes == 0, f"{u.kernel} spills {u.spill_bytes} bytes on sm_{u.arch}"
