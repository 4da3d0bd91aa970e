"""Run ONNX's backend node test cases through the importer and the reference interpreter.

    python -m luminal.onnx.coverage [-k SUBSTRING] [-v]

prints the passes by operator, the pass rate over all node cases, the unsupported operators, the cases
rejected with OnnxUnsupportedError and the failures. tests/onnx/test_node_cases.py runs the same cases.

Each case is one of:
  pass         imported, run, every output equal to ONNX's expected one (rtol/atol from the case)
  fail         anything else going wrong: an exception, or a wrong shape, dtype or value
  unsupported  the model uses an operator the importer does not translate (listed up front by `load`)
  rejected     a translated operator refused an attribute, case or element type with OnnxUnsupportedError
Models that feed a shape-deciding value (a Reshape's shape...) as a graph input are imported with that input
fixed to the case's data (`constant_inputs`), as a real model would hold it in an initializer; such cases are
counted as `fixed inputs`.
"""

from __future__ import annotations

import argparse
import collections
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

import luminal as lm
from luminal.onnx.errors import OnnxDynamicInputError, OnnxUnsupportedError
from luminal.onnx.importer import load, operator_types
from luminal.onnx.registry import supported_operators

# Cases that fail for a reason outside the importer, each with that reason. They still count as failures in
# the table; tests/onnx/test_node_cases.py expects them to fail (strictly: one that starts passing is reported).
KNOWN_DEVIATIONS = {
    name: "the expected output carries complex64 FFT rounding noise (1.9e-7 where the exact value is 0) above "
    "the case's atol of 1e-7; luminal's float32 DFT gives 5.5e-15 there"
    for name in ("test_dft_inverse", "test_dft_inverse_opset19")
}


@dataclass
class Outcome:
    status: str  # pass | fail | unsupported | rejected
    detail: str = ""
    fixed_inputs: tuple[str, ...] = field(default_factory=tuple)


def node_cases() -> list[Any]:
    """ONNX's node test cases, generated in memory (a few seconds: each computes its expected outputs)."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return load_model_tests(kind="node")


def operators_of(case: Any) -> set[str]:
    return operator_types(case.model.graph)


def run_case(case: Any) -> Outcome:
    missing = sorted(operators_of(case) - set(supported_operators()))
    if missing:
        return Outcome("unsupported", ", ".join(missing))
    inputs, expected = (list(map(_array, arrays)) for arrays in case.data_sets[0])
    initialized = {t.name for t in case.model.graph.initializer}
    names = [v.name for v in case.model.graph.input if v.name not in initialized]
    feed = dict(zip(names, inputs))
    fixed: dict[str, np.ndarray] = {}
    try:
        while True:
            try:
                graph = load(case.model, constant_inputs=fixed)
                break
            except OnnxDynamicInputError as e:
                new = [n for n in e.inputs if n in feed and n not in fixed]
                if not new:
                    raise
                fixed.update({n: feed[n] for n in new})
        with np.errstate(all="ignore"):
            got = lm.run(graph, {n: a for n, a in feed.items() if n not in fixed})
    except OnnxUnsupportedError as e:
        return Outcome("rejected", str(e), tuple(fixed))
    except Exception as e:  # every other error is a failure of the importer or the graph it built
        return Outcome("fail", f"{type(e).__name__}: {e}", tuple(fixed))
    for value, want in zip(case.model.graph.output, expected):
        problem = compare(got.get(value.name), np.asarray(want), case.rtol, case.atol)
        if problem:
            return Outcome("fail", f"output {value.name!r}: {problem}", tuple(fixed))
    return Outcome("pass", "", tuple(fixed))


def _array(value: Any) -> np.ndarray:
    """Case data comes as arrays, or as TensorProtos where numpy cannot hold the exact bits (the Cast cases)."""
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


# ml_dtypes' floats (numpy kind "V"): compared as floats, nan equal to nan, not bit for bit.
_ML_FLOATS = (ml_dtypes.bfloat16, *(d.np for d in lm.dtypes.STORAGE_FLOATS))


def compare(got: np.ndarray | None, want: np.ndarray, rtol: float, atol: float) -> str:
    """'' when equal as ONNX's backend tests compare (allclose for floats, exact otherwise), else the problem."""
    if got is None:
        return "missing"
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if want.dtype.kind == "f" or want.dtype in _ML_FLOATS:
        if want.dtype == ml_dtypes.bfloat16:
            rtol = max(rtol, 2**-6)  # two bfloat16 ulps, as ONNX's backend test runner allows
        g, w = got.astype(np.float64), want.astype(np.float64)
        close = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        if not close.all():
            k = int(np.argmin(close.reshape(-1)))
            return f"{int((~close).sum())} of {close.size} values differ (e.g. {g.flat[k]!r} vs {w.flat[k]!r})"
        return ""
    if not np.array_equal(got, want):
        return f"{int((got != want).sum())} of {got.size} values differ"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only cases whose name contains this")
    parser.add_argument("-v", action="store_true", help="print every case")
    args = parser.parse_args(argv)
    cases = [c for c in node_cases() if args.k in c.name]
    outcomes = {}
    for case in cases:
        outcomes[case.name] = run_case(case)
        if args.v:
            o = outcomes[case.name]
            print(f"{o.status:12} {case.name} {o.detail[:200]}")
    by_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for case in cases:
        for op in operators_of(case):
            by_op[op][outcomes[case.name].status] += 1
    claimed = set(supported_operators())
    print("passes by operator (cases using it: pass / total, then fail, rejected, blocked by another operator):")
    for op in sorted(by_op):
        c = by_op[op]
        total = sum(c.values())
        mark = "" if op in claimed else "   [unsupported]"
        print(
            f"  {op:28} {c['pass']:4} / {total:<4} fail {c['fail']:<3} rejected {c['rejected']:<3} "
            f"blocked {c['unsupported']:<3}{mark}"
        )
    counts = collections.Counter(o.status for o in outcomes.values())
    n = len(cases)
    print()
    for status in ("pass", "fail", "rejected", "unsupported"):
        print(f"{status:12} {counts[status]:5}  ({100 * counts[status] / max(n, 1):.1f}%)")
    fixed = sum(1 for o in outcomes.values() if o.status == "pass" and o.fixed_inputs)
    print(f"pass rate over all {n} node cases: {counts['pass']}/{n} = {100 * counts['pass'] / max(n, 1):.1f}%")
    print(f"  ({fixed} of the passing cases fed a shape-deciding input as constant_inputs)")
    unsupported = sorted({op for case in cases for op in operators_of(case)} - claimed)
    print(f"\nunsupported operators ({len(unsupported)}): {', '.join(unsupported)}")
    rejected = sorted((name, o.detail) for name, o in outcomes.items() if o.status == "rejected")
    print(f"\nrejected cases ({len(rejected)}):")
    for name, detail in rejected:
        print(f"  {name}: {detail[:160]}")
    failed = sorted((name, o.detail) for name, o in outcomes.items() if o.status == "fail")
    print(f"\nfailed cases ({len(failed)}):")
    for name, detail in failed:
        known = f"\n      known deviation: {KNOWN_DEVIATIONS[name]}" if name in KNOWN_DEVIATIONS else ""
        print(f"  {name}: {detail[:300]}{known}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
