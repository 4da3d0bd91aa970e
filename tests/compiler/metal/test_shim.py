"""The generated MSL's meaning, checked on the CPU: programs compiled for m2 run through the Metal shim (the MSL
as C++20 against the stand-in metal_stdlib, a threadgroup's threads as fibers with real barriers and SIMD shuffles)
and compute what the reference interpreter computes: every kernel shape, half types, integer types, and the test
models."""

import numpy as np
import pytest

import luminal as lm
from luminal.runtime.metal.shim import MetalShimRuntime
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import CASES, GEMV_CASES
from tests.compiler.metal.models import MODELS

pytestmark = pytest.mark.needs("g++")
# Every kernel shape (thread, warp, row, gemm, attention, copy + scatter), half and integer types; the cases left
# out (elementwise, mlp) add no shape or type these lack; the GEMV runs where it reads int8 weights for a group
# of rows per weight load.
SUBSET = ["reductions", "matmul", "softmax_layernorm", "attention", "gather_scatter", "where_casts", "integer_types"]


@pytest.mark.parametrize("case", SUBSET)
def test_matches_the_reference(case):
    g, feed = CASES[case]()
    assert_matches(MetalShimRuntime().load(lm.compile(g, "m2", cache=False)).run(feed), lm.run(g, feed))


def test_a_q8_0_gemv_over_several_rows_matches_the_reference():
    g, feed = GEMV_CASES["gemv_q8_0_rows"]()
    assert_matches(MetalShimRuntime().load(lm.compile(g, "m2", cache=False)).run(feed), lm.run(g, feed))


@pytest.mark.parametrize("model", MODELS)
def test_models_match_the_reference(model):
    g, feed = MODELS[model]()
    assert_matches(MetalShimRuntime().load(lm.compile(g, "m2", cache=False)).run(feed), lm.run(g, feed))


def test_symbolic_dims_are_read_from_the_dims_buffer():
    g, _ = CASES["softmax_layernorm"]()
    exe = MetalShimRuntime().load(lm.compile(g, "m2", cache=False))
    for rows in (1, 12):
        x = np.random.default_rng(rows).standard_normal((rows, 200)).astype(np.float32)
        np.testing.assert_allclose(exe.run({"x": x})["layernorm"], lm.run(g, {"x": x})["layernorm"], 1e-5, 1e-5)


def test_an_index_out_of_range_is_reported():
    g, feed = CASES["gather_scatter"]()
    feed["ids"] = feed["ids"].copy()
    feed["ids"][3] = 20
    with pytest.raises(IndexError, match="out of range"):
        MetalShimRuntime().load(lm.compile(g, "m2", cache=False)).run(feed)


def test_flash_decoding_runs_with_its_scratch_buffer():
    """A decode attention whose key axis may be long splits over key blocks then combines, as on CUDA; its
    partial results live in a scratch buffer the Metal program must have too."""
    from luminal.compiler.metal.program import launch_plan
    from tests.compiler.cuda.test_flash_decode import decode_attention, feed

    g = decode_attention(2048)
    program = lm.compile(g, "m2", cache=False)
    assert [launch.shape for launch in launch_plan(program.kernels)][-2:] == ["attention_split", "combine"]
    exe = MetalShimRuntime().load(program)
    for keys in (1, 700):
        assert_matches(exe.run(feed(keys)), lm.run(g, feed(keys)))


def test_the_decode_steps_norms_run_in_their_gemvs_prologues():
    """As on CUDA (compiler/gpu/norm_prologue.py): no row kernel is left in the Llama decode step, so the
    model test above runs the fused GEMVs' prologues and epilogues as MSL."""
    from luminal.compiler.metal.program import launch_plan

    for model in ("llama_decode", "llama_decode_bf16"):
        g, _ = MODELS[model]()
        plan = launch_plan(lm.compile(g, "m2", cache=False).kernels)
        gemvs = [launch.writes for launch in plan if launch.shape in ("gemv", "gemvs")]  # GEMVs per dispatch
        assert "row" not in [launch.shape for launch in plan] and sum(gemvs) == 15, (model, plan)
