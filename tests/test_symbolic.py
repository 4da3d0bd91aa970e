"""Symbolic dims: simplification is checked against plain evaluation on random assignments."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import luminal as lm
from luminal.symbolic import SymbolicError, as_expr, const, var

VARS = {"a": (0, 9), "b": (1, 6), "c": (-5, 5)}


def _exprs():
    leaves = st.one_of(
        st.integers(-12, 12).map(lambda v: (const(v), lambda env, v=v: v)),
        st.sampled_from(sorted(VARS)).map(lambda n: (var(n, *VARS[n]), lambda env, n=n: env[n])),
    )

    def extend(children):
        def combine(op, left, right):
            (le, lf), (re, rf) = left, right
            if op == "+":
                return le + re, lambda env: lf(env) + rf(env)
            if op == "-":
                return le - re, lambda env: lf(env) - rf(env)
            if op == "*":
                return le * re, lambda env: lf(env) * rf(env)
            if op == "min":
                return le.min(re), lambda env: min(lf(env), rf(env))
            if op == "max":
                return le.max(re), lambda env: max(lf(env), rf(env))
            if op == "<":
                return le < re, lambda env: int(lf(env) < rf(env))
            # Division and remainder by a non-zero constant or by `b` (always >= 1).
            d, df = (re, rf) if re.is_const and re.value != 0 else (var("b", *VARS["b"]), lambda env: env["b"])
            if op == "//":
                return le // d, lambda env: lf(env) // df(env)
            return le % d, lambda env: lf(env) % df(env)

        ops = st.sampled_from(["+", "-", "*", "//", "%", "min", "max", "<"])
        return st.builds(combine, ops, children, children)

    return st.recursive(leaves, extend, max_leaves=10)


@settings(max_examples=400, deadline=None)
@given(_exprs(), st.integers(0, 9), st.integers(1, 6), st.integers(-5, 5))
def test_simplified_expression_evaluates_like_the_unsimplified_one(pair, a, b, c):
    expr, reference = pair
    env = {"a": a, "b": b, "c": c}
    assert expr.evaluate(env) == reference(env), str(expr)


@settings(max_examples=200, deadline=None)
@given(_exprs(), st.integers(0, 9), st.integers(1, 6), st.integers(-5, 5))
def test_bounds_contain_every_value(pair, a, b, c):
    expr, reference = pair
    value = reference({"a": a, "b": b, "c": c})
    assert expr.lo <= value <= expr.hi, f"{expr}: {value} outside [{expr.lo}, {expr.hi}]"


@settings(max_examples=150, deadline=None)
@given(_exprs(), st.integers(0, 9), st.integers(1, 6), st.integers(-5, 5))
def test_substitution_matches_evaluation(pair, a, b, c):
    expr, reference = pair
    substituted = expr.substitute({"a": a, "c": c})
    assert substituted.evaluate({"b": b}) == reference({"a": a, "b": b, "c": c})


@settings(max_examples=150, deadline=None)
@given(_exprs(), st.integers(0, 9), st.integers(1, 6), st.integers(-5, 5))
def test_json_round_trip(pair, a, b, c):
    expr, _ = pair
    back = lm.symbolic.expr_from_json(expr.to_json())
    assert back == expr
    assert back.evaluate({"a": a, "b": b, "c": c}) == expr.evaluate({"a": a, "b": b, "c": c})


def test_json_decoding_is_memoised_and_still_refuses_hostile_nesting():
    data = (lm.sym("n") * 3 + 1).to_json()
    assert lm.symbolic.expr_from_json(data) is lm.symbolic.expr_from_json(list(data))  # decoded once
    deep: list = ["+", 1]
    for _ in range(100_000):  # far past the depth limit, and past what repr() can walk
        deep = ["+", deep, 1]
    with pytest.raises(SymbolicError, match="nested"):
        lm.symbolic.expr_from_json(deep)
    with pytest.raises(SymbolicError, match="malformed"):
        lm.symbolic.expr_from_json(["var", "n", 1])


def test_canonical_forms():
    n, m = lm.sym("n"), lm.sym("m")
    assert n + 1 + n == 2 * n + 1
    assert n * 3 - n * 3 == 0
    assert (4 * n + m) // 4 == n + m // 4
    assert (4 * n + m) % 4 == m % 4
    assert n * m == m * n
    assert (n + m) * 2 == 2 * m + 2 * n
    i = var("_i0", 0, 11)
    assert (i // 4) * 4 + i % 4 == i  # reshape round trips collapse
    assert i % 12 == i and i // 12 == 0  # bounds drop what cannot change the value
    assert ((i // 2) // 3) == i // 6
    assert (n * m) // m == n
    assert str(2 * n + 1) == "2*n + 1"
    j, k = var("_i1", 0, 2), var("_i2", 0, 55)
    assert (59 * j + k) % 58 == j + k  # a conv window read through a padded row: 59 = 1 modulo 58, then bounds
    seq, t = var("seq", 1, 4096), var("t", 0, 4096)
    assert as_expr(-1) % seq == seq - 1  # a sequence's last position, read as x[-1]
    assert (j - 3) % var("w", 3, 9) == j - 3 + var("w", 3, 9)  # -3 <= j - 3 < 0 and w >= 3
    assert as_expr(-2) % seq != seq - 2 and as_expr(-1) % t != t - 1  # seq may be 1; t may be 0


def test_comparisons_decide_when_bounds_do():
    n = lm.sym("n", min=1, max=10)
    assert bool(n < n + 1)
    assert bool(n >= 1)
    assert not bool(n > 10)
    with pytest.raises(SymbolicError, match="depends on run-time values"):
        bool(n < 5)


def test_render_c_keeps_floor_semantics(tmp_path):
    """The C rendering of // and % must floor like Python, also for negative operands."""
    import subprocess

    c = var("c", -5, 5)
    exprs = [(c - 3) // 2, (c - 3) % 2, c // 3 + c % 4, (c * 2 + 1).min(c + 3), (c < 2) * 5]
    cases = range(-5, 6)
    lines = [lm.symbolic.c_prelude(), "#include <stdio.h>", "int main(void) {"]
    for v in cases:
        lines.append(f"  {{ long long c = {v};")
        for e in exprs:
            lines.append(f'    printf("%lld\\n", (long long)({e.render_c()}));')
        lines.append("  }")
    lines.append("  return 0; }")
    src = tmp_path / "exprs.c"
    src.write_text("\n".join(lines))
    subprocess.run(["cc", "-O0", "-o", str(tmp_path / "exprs"), str(src)], check=True)
    got = [int(x) for x in subprocess.run([str(tmp_path / "exprs")], capture_output=True, check=True).stdout.split()]
    want = [e.evaluate({"c": v}) for v in cases for e in exprs]
    assert got == want


def test_errors_name_the_problem():
    with pytest.raises(SymbolicError, match="must be a letter"):
        lm.sym("1bad")
    with pytest.raises(SymbolicError, match="by zero"):
        lm.sym("n") // 0
    with pytest.raises(SymbolicError, match="not bound"):
        (lm.sym("n") + 1).evaluate({})
    with pytest.raises(SymbolicError, match="empty range"):
        lm.sym("n", min=5, max=2)
    assert as_expr(7) == 7


def test_sums_cancel_through_min_and_max():
    n = lm.sym("n", max=8)
    d = (n - 2).max(0) + 1  # a padded slice of a symbolic dim
    assert d - d == 0
    assert (n - n.min(3)) + n.min(3) == n


def test_expressions_stay_equal_after_pickling_into_another_process():
    # The cached hash is of strings, which differ per process (PYTHONHASHSEED): unpickling must recompute it.
    import pickle
    import subprocess
    import sys

    e = (lm.sym("n", max=64) * 3 + 7) // 2
    probe = "import pickle, sys, luminal as lm; e = pickle.loads(sys.stdin.buffer.read()); "
    probe += "print(e == (lm.sym('n', max=64) * 3 + 7) // 2, hash(e) == hash((lm.sym('n', max=64) * 3 + 7) // 2))"
    for seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-c", probe], input=pickle.dumps(e), capture_output=True, env={"PYTHONHASHSEED": seed}
        )
        assert done.stdout.split() == [b"True", b"True"], done.stderr.decode()


def test_expressions_made_alike_are_one_object_and_results_follow_each_variables_range():
    from luminal.symbolic import expr

    narrow, wide = var("i", 0, 7), var("i", 0, 15)
    assert (narrow * 4 + 3) is (narrow * 4 + 3)  # made once: the smart constructors remember by identity
    assert narrow == wide and narrow is not wide  # equality ignores ranges; the made objects do not
    # A remembered result never crosses to a variable of the same name with another range.
    assert narrow % 8 is narrow and (wide % 8).op == "mod"
    assert (wide % 8).op == "mod" and narrow % 8 is narrow
    before = (wide * 3 + 5) // 2
    expr.forget()  # the tables emptied: what is made again is a new object, equal to the old
    again = (var("i", 0, 15) * 3 + 5) // 2
    assert again == before and hash(again) == hash(before)
    assert again.variable_ranges() == before.variable_ranges() == {("i", 0, 15)}


def test_the_tables_are_emptied_when_full(monkeypatch):
    from luminal.symbolic import expr

    monkeypatch.setattr(expr, "TABLE_LIMIT", 1000)
    expr.forget()
    n = var("n", 1, 4096)
    sums = [n * k + k for k in range(300, 3300)]  # constants past the small ones: each sum is several new objects
    assert len(expr._MADE) <= 1000 and len(expr._RESULTS) <= 1000
    assert sums[-1] == n * 3299 + 3299 and (sums[0] - n * 300) == 300
