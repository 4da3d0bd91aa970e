"""On a real device: buffers derived from the weights at load (compiler/kernels/derived_weights.py) and GEMMs merged
over side-by-side weights (compiler/gpu/sibling_gemms.py) give the reference interpreter's outputs, through one CUDA
graph and kernel by kernel, and the weights only the load read are freed. Skipped where CuPy sees no device."""

import numpy as np
import pytest

import luminal as lm
from luminal.runtime.cuda import CudaRuntime, missing
from tests.compiler.cuda import test_derived_weights, test_sibling_gemms
from tests.compiler.cuda.compare import assert_matches

pytestmark = pytest.mark.skipif(missing() is not None, reason=f"no CUDA here: {missing()}")

GRAPHS = {**test_derived_weights.GRAPHS, "projections": test_sibling_gemms.projections}


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("library", ["auto", "always"])
def test_matches_the_reference(name, library):
    g = GRAPHS[name]()
    exe = CudaRuntime().load(lm.compile(g, "h100", cache=False, gemm_library=library))
    weights = set(exe.program.weights.values())
    read = {buf for launch in exe.plan for buf in launch.buffers}
    assert exe.load and weights & set(exe.weights) == weights & read  # those the load alone read are freed
    for rows in (3, 70, 300):
        feed = {"x": np.random.default_rng(rows).standard_normal((rows, 256)).astype(np.float32)}
        want = lm.run(g, feed)
        assert_matches(exe.run(feed), want)
        assert_matches(exe.run(feed, graph=False), want)
