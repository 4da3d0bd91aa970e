"""Every op test runs once per target (tests/opcheck.py: the interpreter, then compiled for the CPU, through the CUDA
host shim and through the Metal shim, or LUMINAL_OPCHECK_TARGET's); on a compiled target each test's checks compile
into one program."""

import pytest

from tests import opcheck


@pytest.fixture(autouse=True, params=opcheck.targets())
def opcheck_target(request):
    opcheck.TARGET = request.param
    try:
        if not opcheck.compiled():
            yield request.param
            return
        with opcheck.compiled_batch():
            yield request.param
    finally:
        opcheck.TARGET = "reference"
