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


def pytest_collection_modifyitems(items):
    """Each test's targets side by side: [cpu-0], [h100-shim-0], [m2-shim-0], [cpu-1]... instead of every case on
    cpu first. The graph a case searched for one target is then still kept for the next (its e-graph saturates
    once: compiler/search/saturated.py), and worksteal hands neighbours to the same worker. Other tests keep their
    places."""
    slots = [i for i, item in enumerate(items) if "opcheck_target" in _params(item)]
    groups: dict[tuple, list] = {}
    for i in slots:
        item = items[i]
        others = tuple((k, repr(v)) for k, v in _params(item).items() if k != "opcheck_target")
        groups.setdefault((item.path, item.originalname, item.cls, others), []).append(item)
    ordered = [item for group in groups.values() for item in group]
    for i, item in zip(slots, ordered):
        items[i] = item


def _params(item) -> dict:
    callspec = getattr(item, "callspec", None)
    return callspec.params if callspec is not None else {}
