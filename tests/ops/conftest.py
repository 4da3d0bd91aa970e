"""With LUMINAL_OPCHECK_TARGET=cpu (or h100-shim), each test's op checks compile into one program (tests/opcheck.py)."""

import pytest

from tests import opcheck


@pytest.fixture(autouse=True)
def _one_program_per_test():
    if not opcheck.COMPILED:
        yield
        return
    with opcheck.compiled_batch():
        yield
