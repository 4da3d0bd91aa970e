"""ONNX's backend node test cases through luminal.onnx.load and the reference interpreter.

Every case whose operators the importer claims (`supported_operators()`) is one test: it must pass, or be
refused with OnnxUnsupportedError (an attribute, case or element type the translator rejects by name), which
is reported as a skip with the message, so the rejections stay listed in the summary. The few cases whose
expected data is itself off (coverage.KNOWN_DEVIATIONS, with the reason) are strict expected failures. Cases that use an
unclaimed operator must be refused up front with every such operator named. `python -m luminal.onnx.coverage`
prints the same outcomes as a table.
"""

from __future__ import annotations

import pytest

from luminal.onnx import OnnxUnsupportedError, load, supported_operators
from luminal.onnx.coverage import KNOWN_DEVIATIONS, node_cases, operators_of, run_case

CASES = node_cases()
CLAIMED = set(supported_operators())
COVERED = [c for c in CASES if operators_of(c) <= CLAIMED]
UNCOVERED = [c for c in CASES if not operators_of(c) <= CLAIMED]


def test_the_cases_were_generated():
    assert len(CASES) > 1000  # onnx 1.17+ has well over a thousand node cases
    assert len(COVERED) > len(CASES) // 2


def _param(case):
    reason = KNOWN_DEVIATIONS.get(case.name)
    marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
    return pytest.param(case, id=case.name, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in COVERED])
def test_node_case(case):
    outcome = run_case(case)
    if outcome.status == "rejected":
        pytest.skip(f"rejected: {outcome.detail}")
    assert outcome.status == "pass", f"{case.name}: {outcome.detail}"


def test_unclaimed_operators_are_refused_by_name():
    for case in UNCOVERED:
        missing = operators_of(case) - CLAIMED
        with pytest.raises(OnnxUnsupportedError) as info:
            load(case.model)
        assert set(info.value.operators) == missing, case.name
        assert all(op in str(info.value) for op in missing), case.name
