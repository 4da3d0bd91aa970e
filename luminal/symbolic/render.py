"""Text forms of symbolic expressions: readable infix for people, C for kernels."""

from __future__ import annotations

from luminal.symbolic.expr import ADD, AND, CONST, DIV, LT, MAX, MIN, MOD, MUL, VAR, Expr

_ATOMS = (CONST, VAR, MIN, MAX)


def render_text(e: Expr) -> str:
    op = e.op
    if op == CONST:
        return str(e.args[0])
    if op == VAR:
        return e.args[0]
    # Children render through str(), which caches each node's text: rendering stays linear in the DAG.
    if op == ADD:
        out = str(e.args[0])
        for t in e.args[1:]:
            s = str(t)
            out += f" - {s[1:]}" if s.startswith("-") else f" + {s}"
        return out

    def sub(x: Expr) -> str:
        s = str(x)
        return s if x.op in _ATOMS and not s.startswith("-") else f"({s})"

    if op == MUL:
        first = e.args[0]
        if first.op == CONST and first.args[0] == -1:
            return "-" + "*".join(sub(a) for a in e.args[1:])
        return "*".join(sub(a) if a.op != CONST or a.args[0] >= 0 else str(a.args[0]) for a in e.args)
    if op in (MIN, MAX):
        return f"{op}({e.args[0]}, {e.args[1]})"
    sym = {DIV: "//", MOD: "%", LT: "<", AND: "&"}[op]
    return f"{sub(e.args[0])} {sym} {sub(e.args[1])}"


def c_prelude(qualifier: str = "static inline") -> str:
    """Helpers that generated kernels include: floor division and remainder match Python's."""
    return (
        f"{qualifier} long long lm_floordiv(long long a, long long b) {{"
        " long long q = a / b; return q - ((a % b != 0) && ((a < 0) != (b < 0))); }\n"
        f"{qualifier} long long lm_floormod(long long a, long long b) {{"
        " long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }\n"
        f"{qualifier} long long lm_min(long long a, long long b) {{ return a < b ? a : b; }}\n"
        f"{qualifier} long long lm_max(long long a, long long b) {{ return a > b ? a : b; }}\n"
    )


def render_c(e: Expr) -> str:
    op = e.op
    if op == CONST:
        v = e.args[0]
        return f"{v}LL" if abs(v) >= 2**31 else (str(v) if v >= 0 else f"({v})")
    if op == VAR:
        return e.args[0]
    args = [render_c(a) for a in e.args]
    if op == ADD:
        return "(" + " + ".join(args) + ")"
    if op == MUL:
        return "(" + " * ".join(args) + ")"
    a, b = e.args
    # Native C `/` and `%` truncate; they agree with floor semantics when both sides are non-negative.
    if op == DIV:
        return f"({args[0]} / {args[1]})" if a.lo >= 0 and b.lo > 0 else f"lm_floordiv({args[0]}, {args[1]})"
    if op == MOD:
        return f"({args[0]} % {args[1]})" if a.lo >= 0 and b.lo > 0 else f"lm_floormod({args[0]}, {args[1]})"
    if op in (MIN, MAX):
        return f"lm_{op}({args[0]}, {args[1]})"
    if op == LT:
        return f"({args[0]} < {args[1]})"
    return f"({args[0]} && {args[1]})"
