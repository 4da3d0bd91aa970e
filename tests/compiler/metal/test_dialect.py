"""What a Metal program's source looks like: Metal's kernel signatures, half and bfloat, threadgroup memory and
barriers, SIMD shuffles; deterministic; what MSL lacks refused by name; every Apple target compiles."""

import re

import pytest

import luminal as lm
from luminal.compiler.analysis.targets import TARGETS
from luminal.compiler.artifact import ArtifactError, load_program, program_to_bytes
from luminal.compiler.metal.program import MetalUnsupported, refuse_what_msl_lacks
from luminal.compiler.renderer.dialects import METAL
from tests.compiler.cuda.graphs import CASES


def source(case: str, target: str = "m2") -> str:
    g, _ = CASES[case]()
    return lm.compile(g, target, cache=False).source


def test_kernels_have_metal_signatures():
    msl = source("softmax_layernorm")
    assert msl.startswith("#include <metal_stdlib>\nusing namespace metal;\n")
    assert "kernel void k" in msl and "__global__" not in msl and 'extern "C"' not in msl
    assert "device float* _q0 [[buffer(0)]], const device float* _q1 [[buffer(1)]]" in msl
    assert "constant int64_t* D [[buffer(2)]], device int* lm_status [[buffer(3)]]" in msl
    for attribute in ("threadgroup_position_in_grid", "thread_position_in_threadgroup", "threads_per_threadgroup"):
        assert f"[[{attribute}]]" in msl
    assert "threadgroup uint64_t lm_scratch[32];" in msl  # a row kernel's folds over its threadgroup
    assert "threadgroup_barrier(mem_flags::mem_threadgroup)" in msl and "simd_shuffle_xor" in msl


def test_half_types_are_msl_half_and_bfloat():
    msl = source("where_casts")  # its outputs, written by one dispatch (the cases' kernels merged): device
    assert re.search(r"(?<!const )device half\* _q\d", msl) and re.search(r"(?<!const )device bfloat\* _q\d", msl)
    assert "metal::exp2" in msl  # the C names the shared bodies use are defined on metal:: math


def test_the_source_is_deterministic():
    assert source("attention") == source("attention")


@pytest.mark.parametrize("target", [name for name, t in TARGETS.items() if t.kind == "metal"])
def test_every_apple_target_compiles(target):
    assert TARGETS[target].shared_memory_per_block == 32 * 1024
    assert "kernel void" in source("elementwise", target)


@pytest.mark.parametrize("spelling", ["double", "long long", "atomic_long", "asm", "atomicAdd"])
def test_what_msl_lacks_is_refused_by_name(spelling):
    with pytest.raises(MetalUnsupported, match=spelling):
        refuse_what_msl_lacks(f"kernel void k() {{ {spelling} x = 0; }}")
    refuse_what_msl_lacks("kernel void k() { int64_t doubled = 0; }")  # a word that contains one is fine


def test_a_float64_program_is_refused_by_name():
    g = lm.Graph()
    (g.input("x", (8,), dtype=lm.float64).exp() + 1).output("y")
    with pytest.raises(MetalUnsupported, match="`double`: MSL has no 64-bit float type"):
        lm.compile(g, "m2", cache=False)


def test_a_kernel_with_more_buffers_than_metal_binds_is_refused():
    g = lm.Graph()
    total = g.input("x0", (8,))
    for j in range(1, METAL.max_buffers):
        total = total + g.input(f"x{j}", (8,))
    total.output("sum")
    with pytest.raises(MetalUnsupported, match=f"at most {METAL.max_buffers} buffer arguments"):
        lm.compile(g, "m2", cache=False)
    assert "lm_run" in lm.compile(g, "cpu", cache=False).source  # the CPU has no such limit


def test_a_metal_program_survives_the_artifact_round_trip():
    g, _ = CASES["softmax_layernorm"]()
    program = lm.compile(g, "m2", cache=False)
    blob = program_to_bytes(program)
    back = load_program(blob, "m2")
    assert back.target == "m2" and back.source == program.source and program_to_bytes(back) == blob
    with pytest.raises(ArtifactError, match="target"):
        load_program(blob, "h100")  # its source is MSL, not CUDA
