"""Half-precision models keep their activations in their half type on Metal too (compiler/kernels/half_activations.py):
the temporaries shrink to MSL `bfloat` / `half`, and the results do not change. Storing is exact (the graph
rounds there already) and the Metal shim runs the same sums in the same order as the reference interpreter, so
its results equal the reference's bit for bit."""

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.analysis import memory
from luminal.compiler.kernels import ir
from luminal.runtime.metal.shim import MetalShimRuntime
from tests.compiler.metal.models import MODELS

needs_gxx = pytest.mark.needs("g++")
HALF_MODELS = {"llama_prefill_bf16": lm.bfloat16, "llama_decode_fp16": lm.float16}


def _temps(p: ir.KernelProgram) -> dict[str, lm.DType]:
    return {name: b.dtype for name, b in p.buffers.items() if b.role == "temp"}


def _temp_bytes(p: ir.KernelProgram) -> int:
    """The temporaries' bytes at the symbols' maxima."""
    return sum(int(p.buffers[name].size.hi) * d.itemsize for name, d in _temps(p).items())


@pytest.mark.parametrize("model", HALF_MODELS)
def test_half_activations_are_stored_as_msl_half_types(model):
    g, _ = MODELS[model]()
    half = lm.compile(g, "m2", cache=False).kernels
    wide = lm.compile(g, "m2", cache=False, activation_dtype="float32").kernels
    moved = {name for name, d in _temps(half).items() if d != _temps(wide)[name]}
    assert moved and all(_temps(wide)[n] == lm.float32 and _temps(half)[n] == HALF_MODELS[model] for n in moved)
    assert _temp_bytes(half) < _temp_bytes(wide)
    # The arena's peak may be set by buffers that keep float32 (outputs keep their graph type): never larger.
    assert memory.upper_bound_plan(half).arena_bytes <= memory.upper_bound_plan(wide).arena_bytes
    msl = lm.compile(g, "m2", cache=False).source
    spelled = {lm.bfloat16: "bfloat", lm.float16: "half"}[HALF_MODELS[model]]
    assert f"device {spelled}* _q0 [[buffer(0)]]" in msl  # a kernel storing into a half activation
    for name, b in half.buffers.items():  # the declared types of what the caller sees stay
        if b.role in ("input", "output", "weight"):
            assert b.dtype == wide.buffers[name].dtype


def test_the_option_is_checked_for_metal():
    g, _ = MODELS["llama_decode_fp16"]()
    with pytest.raises(ValueError, match="activation_dtype"):
        lm.compile(g, "m2", cache=False, activation_dtype="bfloat16")


@needs_gxx
@pytest.mark.parametrize("model", HALF_MODELS)
def test_the_shim_equals_the_reference_exactly(model):
    g, feed = MODELS[model]()
    got = MetalShimRuntime().load(lm.compile(g, "m2", cache=False)).run(feed)
    want = lm.run(g, feed)
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype
        np.testing.assert_array_equal(got[name].astype(np.float32), value.astype(np.float32), err_msg=name)
