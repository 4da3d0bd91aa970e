"""NVRTC (through ctypes, no GPU needed) compiles every generated CUDA program to a CUBIN for sm_80 and sm_90,
caches it by (source, arch, NVRTC version, options), and reports a broken source with NVRTC's own log."""

import sys
from pathlib import Path

import pytest

import luminal as lm
from luminal.compiler.cuda.program import launch_plan
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
        for launch in launch_plan(program.kernels):  # extern "C": the names the runtime looks up, unmangled
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

    monkeypatch.setattr(nvrtc, "compile_uncached", no_compile)
    assert nvrtc.compile_cubin(source, "90") == first
    assert nvrtc.cache_path(source, "80") != nvrtc.cache_path(source, "90")
    assert nvrtc.cache_path(source, "90", ("--fmad=true",)) != nvrtc.cache_path(source, "90")
    with pytest.raises(AssertionError, match="compiled again"):
        nvrtc.compile_cubin(source, "80")  # another architecture is another entry


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
