"""Every program of the CUDA tests' cases and the test models, compiled for a Metal target, is MSL that compiles as
C++ against the stand-in metal_stdlib (runtime/metal/host_shim/): the shapes of Metal's signatures and what the
MSL lacks are checked in test_dialect.py, what the MSL computes in test_shim.py."""

import pytest

import luminal as lm
from luminal.compiler.metal.program import launch_plan
from luminal.runtime.metal.shim import check_source
from tests.compiler.cuda.graphs import CASES
from tests.compiler.cuda.graphs import MODELS as CUDA_MODELS
from tests.compiler.metal.models import MODELS

pytestmark = pytest.mark.needs("g++")
# float64_values is left out: MSL has no double, and Metal refuses it by name (test_dialect.py).
PROGRAMS = {**{k: v for k, v in CASES.items() if k != "float64_values"}, **CUDA_MODELS, **MODELS}


@pytest.mark.parametrize("case", PROGRAMS)
def test_msl_compiles_against_the_stand_in_header(case):
    g, _ = PROGRAMS[case]()
    program = lm.compile(g, "m2", cache=False)
    check_source(program.source)
    for launch in launch_plan(program.kernels):  # every launch is a kernel of the source, by name
        assert f"kernel void {launch.kernel}(" in program.source


def test_the_stand_in_header_rejects_what_msl_lacks():
    """The check is not vacuous: C library names and double are not in MSL and do not compile here either."""
    for body in ("return exp2f(x);", "double d = x; return d;", "return memcpy(0, 0, 0) ? x : x;"):
        with pytest.raises(RuntimeError, match="did not compile"):
            check_source(f"#include <metal_stdlib>\nusing namespace metal;\nfloat f(float x) {{ {body} }}\n")
    check_source("#include <metal_stdlib>\nusing namespace metal;\nfloat f(float x) { return metal::exp2(x); }\n")
