"""NVRTC (through ctypes, no GPU needed) compiles every generated CUDA program to a CUBIN for sm_80 and sm_90,
caches it by (source, arch, NVRTC version, options), and reports a broken source with NVRTC's own log."""

import pytest

import luminal as lm
from luminal.compiler.cuda.program import launch_plan
from luminal.runtime.cuda import nvrtc
from tests.compiler.cuda.graphs import CASES, MODELS


@pytest.mark.parametrize("case", [*CASES, "encoder_block", "gpt2"])
def test_every_program_compiles_to_a_cubin(case):
    g, _ = {**CASES, **MODELS}[case]()
    program = lm.compile(g, "h100")
    for arch in ("80", "sm_90"):
        cubin = nvrtc.compile_uncached(program.source, arch)
        assert cubin[:4] == nvrtc.ELF_MAGIC
        for launch in launch_plan(program.kernels):  # extern "C": the names the runtime looks up, unmangled
            assert launch.kernel.encode() + b"\0" in cubin


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
