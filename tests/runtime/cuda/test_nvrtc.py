"""NVRTC (through ctypes, no GPU needed) compiles every generated CUDA program to a CUBIN for sm_80 and sm_90,
caches it by (source, arch, NVRTC version, options), and reports a broken source with NVRTC's own log."""

import re
import sys
from pathlib import Path

import pytest

import luminal as lm
from luminal.compiler.cuda.program import launch_plan, load_plan
from luminal.runtime.cuda import nvrtc
from tests.compiler.cuda.graphs import CASES, MODELS, bind_random

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))  # the bench's models
from gpu_models import SMALL, encoder_graph, llama_graphs  # noqa: E402


@pytest.mark.parametrize("case", [*CASES, "encoder_block", "gpt2"])
def test_every_program_compiles_to_a_cubin(case):
    g, _ = {**CASES, **MODELS}[case]()
    program = lm.compile(g, "h100")
    for arch in ("80", "sm_90"):
        cubin = nvrtc.compile_uncached(program.source, arch)
        assert cubin[:4] == nvrtc.ELF_MAGIC
        for launch in [*load_plan(program.kernels), *launch_plan(program.kernels)]:  # extern "C": unmangled names
            assert launch.kernel.encode() + b"\0" in cubin


@pytest.mark.parametrize("target, arch", [("a100", "80"), ("l4", "89"), ("t4", "75")])
def test_half_models_compile_for_each_targets_own_architecture(target, arch):
    """What a deployment on an A100, L4 or T4 compiles when it loads, for that GPU's architecture: the bf16 Llama's
    prefill and decode step, the bf16 encoder and the tensor-core GEMMs in bf16 and fp16 (a T4 has no bf16
    tensor cores: there the source takes its scalar path)."""
    graphs = llama_graphs(SMALL)
    models = [bind_random(g) for g in (graphs.prefill, graphs.step, encoder_graph(SMALL))]
    for graph in [*models, CASES["half_matmul"]()[0], CASES["half_matmul_fp16"]()[0]]:
        source = lm.compile(graph, target, cache=False).source
        assert nvrtc.compile_uncached(source, arch)[:4] == nvrtc.ELF_MAGIC


def test_the_cache_answers_the_second_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    source = lm.compile(CASES["elementwise"]()[0], "h100").source
    first = nvrtc.compile_cubin(source, "90")
    assert list((tmp_path / "cuda-cubin").glob("*.sm_90.cubin")) == [nvrtc.cache_path(source, "90")]

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled again although the cache holds this CUBIN")

    monkeypatch.setattr(nvrtc, "compile_with_report", no_compile)
    assert nvrtc.compile_cubin(source, "90") == first
    assert [u.kernel for u in nvrtc.kernel_usage(source, "90")]  # the report was kept beside the CUBIN
    assert nvrtc.cache_path(source, "80") != nvrtc.cache_path(source, "90")
    assert nvrtc.cache_path(source, "90", ("--fmad=true",)) != nvrtc.cache_path(source, "90")
    with pytest.raises(AssertionError, match="compiled again"):
        nvrtc.compile_cubin(source, "80")  # another architecture is another entry


# 48 accumulators live across loops, under launch bounds that leave a thread 32 registers: ptxas must spill.
SPILLING = r"""
extern "C" __global__ void __launch_bounds__(1024, 2) tight(float* out, const float* in) {
  float acc[48];
  #pragma unroll
  for (int i = 0; i < 48; i++) acc[i] = in[threadIdx.x * 48 + i];
  #pragma unroll
  for (int r = 0; r < 8; r++) {
    #pragma unroll
    for (int i = 0; i < 48; i++) acc[i] = acc[i] * acc[(i * 7 + r) % 48] + in[i + r];
  }
  float s = 0.0f;
  #pragma unroll
  for (int i = 0; i < 48; i++) s += acc[i] * in[1000 + i];
  out[threadIdx.x] = s;
}
"""


def test_ptxas_reports_each_kernels_registers_spills_and_shared_memory(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    (tight,) = nvrtc.kernel_usage(SPILLING, "90")
    assert (tight.kernel, tight.arch, tight.registers) == ("tight", "90", 32) and tight.spill_bytes > 0
    program = lm.compile(CASES["softmax_layernorm"]()[0], "h100")
    usages = nvrtc.kernel_usage(program.source, "80")
    assert {u.kernel for u in usages} == {launch.kernel for launch in launch_plan(program.kernels)}
    assert all(u.arch == "80" and 0 < u.registers <= 255 and u.spill_bytes == 0 for u in usages)
    assert any(u.shared_bytes > 0 for u in usages)  # the row reductions stage partial sums in shared memory


def test_the_precompiled_header_is_used_and_changes_nothing_it_builds(monkeypatch):
    """NVRTC's automatic precompiled header: a later compile of the same includes starts from it, and the CUBIN and
    ptxas's report (but its timings) are what a compile without it gives, on either architecture, so the cache key
    does not name it. Another include sequence compiled first (in `make test` a worker compiles many) leaves a header
    the program's includes do not fit."""
    source = lm.compile(CASES["softmax_layernorm"]()[0], "h100").source
    other = '#include <mma.h>\n#include <cuda_fp16.h>\nextern "C" __global__ void k(float* a) { a[0] = 1.0f; }\n'
    nvrtc.compile_with_report(other, "80")
    monkeypatch.setattr(nvrtc, "PRECOMPILED_HEADER", ())
    keys = {arch: nvrtc.cache_path(source, arch) for arch in ("80", "90")}
    plain = {arch: nvrtc.compile_with_report(source, arch) for arch in ("80", "90")}
    monkeypatch.setattr(nvrtc, "PRECOMPILED_HEADER", ("-pch",))  # with its messages, which name the header it read
    nvrtc.compile_with_report(source, "80")
    assert "using precompiled header" in nvrtc.compile_with_report(source, "80")[1]
    monkeypatch.undo()
    assert nvrtc.PRECOMPILED_HEADER
    for arch in ("80", "90"):  # sm_90's compile finds a header made for sm_80's options
        cubin, report = nvrtc.compile_with_report(source, arch)
        assert cubin == plain[arch][0]
        assert _untimed(report) == _untimed(plain[arch][1])
        assert nvrtc.cache_path(source, arch) == keys[arch]


def _untimed(report: str) -> str:
    """ptxas's report without the time each kernel took to compile."""
    return re.sub(r"Compile time = [0-9.]+ ms", "", report)


def test_a_broken_source_raises_with_the_log():
    source = 'extern "C" __global__ void k(float* x) { x[0] = undeclared_name; }\n'
    with pytest.raises(nvrtc.NvrtcError, match=r"(?s)sm_90.*undeclared_name.*undefined"):
        nvrtc.compile_uncached(source, "90")


def test_the_version_and_the_headers_are_found():
    major, minor = nvrtc.version()
    assert major >= 12 and minor >= 0
    flags = nvrtc.include_flags()
    assert flags and all(f.startswith("-I") for f in flags)


def test_a_missing_library_names_what_to_install(monkeypatch):
    monkeypatch.setattr(nvrtc, "_candidates", lambda: [])
    nvrtc.library.cache_clear()
    try:
        with pytest.raises(nvrtc.NvrtcError, match="nvidia-cuda-nvrtc"):
            nvrtc.library()
    finally:
        nvrtc.library.cache_clear()


def test_header_folders_are_found_in_nvidia_wheels_and_the_toolkit_the_environment_names(tmp_path, monkeypatch):
    wheel = tmp_path / "site" / "nvidia" / "cu13" / "include"
    toolkit = tmp_path / "toolkit" / "include"
    empty = tmp_path / "site" / "nvidia" / "cublas" / "include"  # a wheel without the runtime's headers
    for folder in (wheel, toolkit, empty):
        folder.mkdir(parents=True)
    for folder in (wheel, toolkit):
        (folder / "cuda_fp16.h").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("CUDA_PATH", str(tmp_path / "toolkit"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    found = nvrtc.header_folders()
    assert str(toolkit) in found and str(wheel) in found and str(empty) not in found
    assert found.index(str(toolkit)) < found.index(str(wheel))  # the toolkit the environment names comes first
