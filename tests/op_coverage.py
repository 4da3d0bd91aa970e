"""Which high-level ops the PyTorch comparison covers: `python -m tests.op_coverage`.

Scans the test suite for `check("name", ...)` calls (tests/opcheck.py) and prints every covered op name,
then the ops the core issue requires, marking any without a check. A variant such as "gelu_tanh" counts
for "gelu" too.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent

REQUIRED = {
    "elementwise": "neg abs sign exp exp2 log log2 sqrt rsqrt reciprocal sin cos tan tanh sigmoid relu leaky_relu "
    "gelu gelu_tanh silu softplus elu square pow clamp minimum maximum where eq ne lt le gt ge logical_and "
    "logical_or logical_not floor_divide remainder erf to",
    "reduction": "sum mean max min prod var std argmax argmin logsumexp cumsum all any",
    "movement": "reshape view permute transpose expand squeeze unsqueeze flatten getitem pad pad_reflect cat stack "
    "split chunk repeat flip gather index_select embedding scatter one_hot tril triu arange full zeros ones",
    "nn": "matmul linear softmax log_softmax layer_norm rms_norm group_norm batch_norm conv1d conv2d max_pool2d "
    "avg_pool2d adaptive_avg_pool2d sdpa sdpa_causal sdpa_mask sdpa_gqa rotary dropout",
}


def covered_ops() -> dict[str, list[str]]:
    """{op name: [test files that check it]}."""
    found: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "check"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.setdefault(node.args[0].value, []).append(path.relative_to(TESTS).as_posix())
    return found


def missing_ops(found: dict[str, list[str]]) -> list[str]:
    names = set(found)
    return [
        op
        for group in REQUIRED.values()
        for op in group.split()
        if op not in names and not any(n.startswith(op + "_") for n in names)
    ]


def main() -> None:
    found = covered_ops()
    print(f"{len(found)} op names checked against PyTorch:")
    for name in sorted(found):
        print(f"  {name:28} {', '.join(sorted(set(found[name])))}")
    missing = missing_ops(found)
    print(f"required by the core issue and not checked: {missing or 'none'}")


if __name__ == "__main__":
    main()
