"""Compiling for a GPU target on a machine without one: the search ranks with the target's roofline, the program
holds its whole CUDA source, survives the artifact round trip, and says plainly why it cannot run here."""

import pytest

import luminal as lm
from luminal.compiler.artifact import ArtifactError, load_program, program_to_bytes
from luminal.runtime import RuntimeUnavailable
from luminal.runtime.cuda import missing
from tests.compiler.cuda.graphs import CASES


@pytest.fixture(scope="module")
def mlp_programs():
    g, feed = CASES["mlp"]()
    return g, feed, {t: lm.compile(g, t, cache=False) for t in ("cpu", "h100")}


@pytest.mark.parametrize("target", ["h100", "h200", "a100", "l4", "t4"])
def test_gpu_targets_compile_to_cuda(target):
    g, _ = CASES["softmax_layernorm"]()
    program = lm.compile(g, target, cache=False)
    assert program.target == target and program.source.startswith("#include <math.h>")
    for k in program.kernels.kernels:
        assert f'extern "C" __global__ void __launch_bounds__(256, 2) {k.name}(' in program.source
    assert lm.compile(g, target, cache=False).source == program.source  # deterministic


def test_search_ranks_with_the_targets_roofline(mlp_programs):
    _, _, programs = mlp_programs
    estimate = {t: {r["name"]: r["estimated_s"] for r in p.report["candidates"]} for t, p in programs.items()}
    assert estimate["h100"].keys() == estimate["cpu"].keys()
    assert all(estimate["h100"][n] < estimate["cpu"][n] for n in estimate["cpu"])
    assert programs["h100"].report["kernels"]["gemm"] == 2  # both linear layers with their epilogues


def test_run_says_what_is_missing(mlp_programs):
    _, feed, programs = mlp_programs
    if missing() is None:
        pytest.skip("CuPy sees a CUDA device here")
    with pytest.raises(RuntimeUnavailable, match="CuPy|CUDA device"):
        programs["h100"].run(feed)


def test_artifact_round_trip(mlp_programs):
    _, _, programs = mlp_programs
    blob = program_to_bytes(programs["h100"])
    back = load_program(blob, "h100")
    assert back.target == "h100" and back.source == programs["h100"].source
    with pytest.raises(ArtifactError, match="target"):
        load_program(blob, "a100")
    assert program_to_bytes(back) == blob


def test_the_compile_cache_keeps_gpu_programs_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    g, _ = CASES["elementwise"]()
    first = lm.compile(g, "h100")
    again, other = lm.compile(g, "h100"), lm.compile(g, "a100")
    assert not first.report["cache"]["hit"] and again.report["cache"]["hit"] and not other.report["cache"]["hit"]
    assert again.source == first.source
