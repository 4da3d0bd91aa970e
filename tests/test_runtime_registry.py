"""The runtime registry: a runtime per target kind, and a clear error where one cannot run here."""

import numpy as np
import pytest

import luminal as lm
from luminal.runtime import RuntimeUnavailable, runtime_for
from luminal.runtime.cpu import CpuRuntime
from luminal.runtime.reference import ReferenceRuntime


def test_kinds_find_their_runtimes():
    assert isinstance(runtime_for("cpu"), CpuRuntime)
    assert isinstance(runtime_for("reference"), ReferenceRuntime)


def test_unknown_kind_is_named():
    with pytest.raises(RuntimeUnavailable, match="vulkan"):
        runtime_for("vulkan")


def test_metal_says_what_is_missing():
    with pytest.raises(RuntimeUnavailable, match="Metal"):
        runtime_for("metal").load(object())


def test_reference_and_cpu_programs_run_through_the_registry():
    g = lm.Graph()
    x = g.input("x", (3, 4))
    (x.exp() + 1).output("y")
    xs = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    for target in ("reference", "cpu"):
        out = lm.compile(g, target, cache=False).run({"x": xs})["y"]
        np.testing.assert_allclose(out, np.exp(xs) + 1, rtol=1e-6)
