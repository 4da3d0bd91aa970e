"""Half-type GEMMs on tensor cores ("mma" launches, compiler/cuda/gemm_mma.py): which GEMMs take them, and their
meaning on the CPU through the host shim's wmma stand-in, and through the FMA path compiled for GPUs whose
tensor cores lack the type (a T4 has no bf16 wmma)."""

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.compiler.cuda.program import launch_plan
from luminal.compiler.kernels import ir
from luminal.compiler.program import CompiledProgram
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda import nvcc
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import CASES, bind_random

needs_gxx = pytest.mark.needs("g++")


def shapes(case: str) -> tuple[CompiledProgram, list[tuple[str, int]]]:
    g, _ = CASES[case]()
    program = lm.compile(g, "h100", cache=False)
    return program, [(launch.shape, launch.block) for launch in launch_plan(program.kernels)]


def test_half_gemms_take_tensor_cores_and_float32_ones_do_not():
    for case in ("half_matmul", "half_matmul_fp16"):
        program, launched = shapes(case)
        assert ("mma", 128) in launched and "#include <mma.h>" in program.source
    program, launched = shapes("matmul")  # float32 operands: tensor cores would round them (tf32)
    assert ("gemm", 256) in launched and ("mma", 128) not in launched
    assert "mma.h" not in program.source


@needs_gxx
@pytest.mark.parametrize("arch", ["75", "80"])
def test_the_path_each_architecture_compiles_matches_the_reference(arch):
    """sm_75 has no bf16 tensor cores: the same source sums the tiles with FMAs there; sm_80 runs wmma."""
    g, feed = CASES["half_matmul"]()
    program = lm.compile(g, "h100", cache=False)
    assert_matches(ShimRuntime(arch=arch).load(program).run(feed), lm.run(g, feed))


@pytest.mark.needs("nvcc")
def test_a_bf16_tensor_core_gemm_compiles_for_a_t4_without_spills():
    program, _ = shapes("half_matmul")
    for usage in nvcc.compile_cuda(program.source, archs=("75",)):
        assert usage.spill_bytes == 0, f"{usage.kernel} spills {usage.spill_bytes} bytes on sm_75"


def test_tensor_core_gemms_read_half_operands_past_the_casts():
    """The float32 copies the casts wrote are read by no one any more: neither the casts nor their buffers stay."""
    for case in ("half_matmul", "half_matmul_fp16"):
        program, launched = shapes(case)
        assert [shape for shape, _ in launched] == ["mma"]
        gemm = program.kernels.kernels[0]
        operands = {program.kernels.buffers[b].dtype for b in ir.buffers_read(gemm)}
        assert operands == {lm.bfloat16 if case == "half_matmul" else lm.float16}
        assert set(program.kernels.buffers) == ir.buffers_read(gemm) | {gemm.out}


@needs_gxx
def test_a_tensor_core_gemm_at_a_buckets_grid_matches_the_reference():
    """Rows a symbol counts: launched at the bucket's grid (4 tiles of rows for 130, of which 3 are live)."""
    g, rng = lm.Graph(), np.random.default_rng(15)
    x = g.input("x", (lm.sym("n", max=300), 2048), lm.float16)
    F.linear(x, g.weight("w", (136, 2048), lm.float16)).output("out")
    g = bind_random(g)
    program = lm.compile(g, "h100", cache=False)
    assert [launch.shape for launch in launch_plan(program.kernels)][0] == "mma"
    exe = ShimRuntime(buckets=True).load(program)
    for n in (130, 3):
        feed = {"x": rng.standard_normal((n, 2048)).astype(np.float16)}
        assert_matches(exe.run(feed), lm.run(g, feed))
