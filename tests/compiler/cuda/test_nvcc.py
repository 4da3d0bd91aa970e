"""Every generated CUDA program compiles with nvcc for sm_80 and sm_90, and no kernel spills registers."""

import re

import pytest

import luminal as lm
from luminal.compiler.cuda.program import launch_plan, load_plan
from tests.compiler.cuda import nvcc
from tests.compiler.cuda.graphs import CASES, GEMV_CASES, MODELS

pytestmark = pytest.mark.needs("nvcc")


@pytest.mark.parametrize("case", [*CASES, *GEMV_CASES, "encoder_block", "gpt2"])
def test_compiles_without_spills(case):
    g, _ = {**CASES, **GEMV_CASES, **MODELS}[case]()
    program = lm.compile(g, "h100", cache=False)
    usages = nvcc.compile_cuda(program.source)
    kernels = {launch.kernel for launch in [*load_plan(program.kernels), *launch_plan(program.kernels)]}
    assert {(u.kernel, u.arch) for u in usages} == {(k, a) for k in kernels for a in nvcc.ARCHS}
    for u in usages:
        print(f"{case} {u.kernel} sm_{u.arch}: {u.registers} registers, {u.shared_bytes} B shared")
        assert u.spill_bytes == 0, f"{u.kernel} spills {u.spill_bytes} bytes on sm_{u.arch}"
        assert u.registers <= 255 and u.shared_bytes <= 48 * 1024  # static shared memory needs no opt-in


def test_every_kernel_shape_is_covered():
    """The cases above reach every way the generator maps a kernel onto the GPU."""
    shapes = set()
    for make in [*CASES.values(), GEMV_CASES["gemv_bf16"]]:
        g, _ = make()
        shapes |= {launch.shape for launch in launch_plan(lm.compile(g, "h100", cache=False).kernels)}
    expected = {"thread", "threads", "warp", "warps", "row", "gemv", "gemm", "mma", "attention", "copy", "scatter"}
    assert shapes == expected


def test_the_gemv_reads_its_weight_with_16_byte_loads():
    """lm_load16 becomes one vector load (ld.global[.nc].v4) in the PTX, not 16 byte loads."""
    g, _ = GEMV_CASES["gemv_bf16"]()
    ptx = nvcc.ptx(lm.compile(g, "h100", cache=False).source)
    assert re.search(r"ld\.global(\.nc)?\.v4\.u32", ptx)


def test_a_second_compile_of_a_source_reads_what_ptxas_reported_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    source = lm.compile(CASES["elementwise"]()[0], "h100").source
    first = nvcc.compile_cuda(source)
    assert len(list((tmp_path / "nvcc-ptxas").glob("*.ptxas.txt"))) == 1

    def no_compile(*args, **kwargs):
        raise AssertionError("nvcc ran again although the cache holds its report")

    monkeypatch.setattr(nvcc, "_report", no_compile)
    assert nvcc.compile_cuda(source) == first
    with pytest.raises(AssertionError, match="ran again"):
        nvcc.compile_cuda(source, archs=("90",))  # other architectures are another entry
