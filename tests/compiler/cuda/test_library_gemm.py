"""GEMMs given to cuBLAS (compiler/cuda/library_gemm.py, gemm_choice.py): which GEMMs are eligible and the call's
arguments, when the roofline chooses the call, the "cublas" step in the source and the artifact, and the step's
meaning on the CPU through the host shim's stand-in (runtime/cuda/host_shim/lm_cublas.h) against the reference."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.compiler.artifact import ArtifactError, load_program, program_to_bytes
from luminal.compiler.cuda.library_gemm import gemm_call
from luminal.compiler.cuda.program import launch_plan
from luminal.compiler.storage.artifact_json import program_from_json, program_to_json
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.gemm_cases import GEMMS
from tests.compiler.cuda.graphs import CASES, bind_random

ROOT = Path(__file__).resolve().parents[3]
needs_gxx = pytest.mark.needs("g++")


def with_cublas(case: str):
    g, feed = GEMMS[case]()
    return g, feed, lm.compile(g, "h100", cache=False, gemm_library="always")


def calls(program) -> list:
    return [launch.call for launch in launch_plan(program.kernels) if launch.call is not None]


def large_linear(bias: bool = False) -> lm.Graph:
    g = lm.Graph()
    x = g.input("x", (lm.sym("tokens", max=512), 2048), lm.bfloat16)
    w = g.weight("w", (2048, 2048), lm.bfloat16)
    F.linear(x, w, g.weight("b", (2048,), lm.bfloat16) if bias else None).output("y")
    return bind_random(g)


def test_the_calls_arguments():
    (call,) = calls(with_cublas("batched")[2])  # row-major [6, 70, 90] = C^T (90 x 70) per batch: B^T A^T
    assert (call.m, call.n, call.k, call.batch) == (90, 70, 40, 6)
    assert (call.a.ld, call.a.batch_stride, call.a.transpose) == (90, 40 * 90, False)
    assert (call.b.ld, call.b.batch_stride, call.b.transpose) == (40, 70 * 40, False)
    assert (call.c.ld, call.c.batch_stride) == (90, 70 * 90)
    (call,) = calls(with_cublas("linear_bf16")[2])  # a [out, in] weight is read transposed, as stored
    assert call.a.transpose and call.a.ld == 128 and not call.b.transpose and str(call.n) == "rows"
    assert {x.dtype.name for x in (call.a, call.b, call.c)} == {"bfloat16"}
    (call,) = calls(with_cublas("half_to_float")[2])
    assert (call.a.dtype.name, call.c.dtype.name) == ("float16", "float32")
    (call,) = calls(with_cublas("transposed")[2])
    assert call.b.transpose and call.b.ld == 70
    (call,) = calls(with_cublas("sliced")[2])  # cuBLAS's B is our A: a[:, 8:]
    assert (call.b.offset, call.b.ld, call.a.offset) == (8, 56, 0)


def test_a_fused_epilogue_or_a_symbolic_stride_makes_a_gemm_ineligible():
    program = lm.compile(CASES["matmul"]()[0], "h100", cache=False, gemm_library="always")  # bias + relu fused
    assert not program.kernels.library and not calls(program)
    assert all(gemm_call(program.kernels, k) is None for k in program.kernels.kernels)
    g = lm.Graph()  # the batch stride of a is rows * 40: a graph captured for a bucket would read it wrongly
    (g.input("a", (3, lm.sym("rows", max=64), 40)) @ g.input("b", (3, 40, 80))).output("y")
    program = lm.compile(g, "h100", cache=False, gemm_library="always")
    assert not program.kernels.library


def test_the_roofline_gives_large_gemms_to_cublas_and_keeps_small_ones_generated():
    program = lm.compile(large_linear(), "h100", cache=False)
    assert program.report["kernels"]["library_gemm"] == 1 and program.report["choice"].endswith("+cublas")
    rows = {r["name"]: r["estimated_s"] for r in program.report["candidates"]}
    choice = program.report["choice"]
    assert rows[choice] < rows[choice.removesuffix("+cublas")]
    assert "/* k" in program.source and "cublasGemmStridedBatchedEx(" in program.source
    never = lm.compile(large_linear(), "h100", cache=False, gemm_library="never")
    assert never.report["kernels"]["library_gemm"] == 0 and "cublas" not in never.source
    small = lm.compile(CASES["half_matmul_fp16"]()[0], "h100", cache=False)  # 36 M multiply-adds: one launch less
    assert small.report["kernels"]["library_gemm"] == 0
    assert lm.compile(large_linear(bias=True), "h100", cache=False).report["kernels"]["library_gemm"] == 0
    with pytest.raises(ValueError, match="gemm_library must be one of"):
        lm.compile(large_linear(), "h100", cache=False, gemm_library="sometimes")
    cpu = lm.compile(large_linear(), "cpu", cache=False, gemm_library="always")
    assert not cpu.kernels.library  # no library GEMMs on a CPU target


@needs_gxx
@pytest.mark.parametrize("case", list(GEMMS))
@pytest.mark.parametrize("buckets", [False, True], ids=["exact", "bucket"])
def test_the_step_matches_the_reference_through_the_shim(case, buckets):
    g, feed, program = with_cublas(case)
    assert [launch.shape for launch in launch_plan(program.kernels)] == ["cublas"]
    assert_matches(ShimRuntime(buckets=buckets).load(program).run(feed), lm.run(g, feed))


def test_the_artifact_records_the_library_calls():
    _, _, program = with_cublas("linear_bf16")
    blob = program_to_bytes(program)
    back = load_program(blob, "h100")
    assert back.kernels.library == program.kernels.library and back.source == program.source
    data = program_to_json(program.kernels)
    assert data["library"] == [[name, "cublas"] for name in program.kernels.library]
    assert "library" not in program_to_json(lm.compile(CASES["elementwise"]()[0], "h100", cache=False).kernels)
    with pytest.raises(ArtifactError, match="known: cublas"):
        program_from_json({**data, "library": [[data["library"][0][0], "rocblas"]]})
    with pytest.raises(ArtifactError, match="not a kernel"):
        program_from_json({**data, "library": [["k999", "cublas"]]})


WORKER = """
import sys
sys.modules["egglog"] = None  # a worker without the compiler's search: importing egglog fails
import numpy as np, ml_dtypes
from luminal.compiler.artifact import load_program
from luminal.runtime.cuda.shim import ShimRuntime
program = load_program(open(sys.argv[1], "rb").read(), "h100")
x = np.load(sys.argv[2]).view(ml_dtypes.bfloat16)  # saved as its bits
y = ShimRuntime().load(program).run({"x": x})["y"]
w = program.graph.weight_data["w"].astype(np.float32)
want = (x.astype(np.float32) @ w.T).astype(ml_dtypes.bfloat16)
np.testing.assert_allclose(y.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)
print(sorted(program.kernels.library.values()), "egglog" in sys.modules and sys.modules["egglog"] is not None)
"""


@needs_gxx
def test_an_artifact_with_cublas_steps_loads_and_runs_without_the_search(tmp_path):
    g, feed, program = with_cublas("linear_bf16")
    (tmp_path / "p.lmp").write_bytes(program_to_bytes(program))
    np.save(tmp_path / "x.npy", feed["x"].view(np.uint16))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-c", WORKER, str(tmp_path / "p.lmp"), str(tmp_path / "x.npy")]
    done = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["['cublas']", "False"]
