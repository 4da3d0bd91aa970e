"""Checking that egglog stored each inserted `let` as it was sent.

egglog 13.2.0 sometimes stores a term with a child reference resolved to the wrong global `let`: on a Llama
decoder, `(let $n172 (Add $n17 4 $n171 4))` was stored as Add($n171, 4, $n171, 4), a residual add reading its
second operand twice, so every searched candidate computed something else. It reproduces in plain egglog text
(tests/compiler/test_insertion.py). Every case seen had one name start another's (`$n17`, `$n171`; upstream,
`$__expr_1`, `$__expr_12`), though not every such pair goes wrong, so the encoder both names lets
prefix-free and checks what was stored, inserting the graph again under other names where something differs
(search/encode.py).
"""

from __future__ import annotations

from typing import Any

from egglog import EGraph
from egglog.declarations import LetRefDecl, LitDecl, ValueDecl


def misinserted(egraph: EGraph, inserted: dict[str, Any]) -> list[str]:
    """Names of the lets (`name` -> the depth-one term sent) whose e-class lacks the e-node that was sent:
    the constructor applied to the e-classes of the lets it referenced and to the same literals."""
    frozen = egraph.freeze().decl
    classes = {name: binding.expr.value for name, binding in frozen.let_bindings.items()}
    wrong = []
    for name, term in inserted.items():
        sent = term.__egg_typed_expr__.expr
        want = (sent.callable, tuple(_sent_arg(a.expr, classes) for a in sent.args))
        _, stored = frozen.e_classes[classes[f"${name}"]]
        if want not in {(call.callable, tuple(_stored_arg(a.expr) for a in call.args)) for call in stored}:
            wrong.append(name)
    return wrong


def _sent_arg(expr: Any, classes: dict[str, Any]) -> Any:
    if isinstance(expr, LetRefDecl):
        return classes[f"${expr.name}"]
    if isinstance(expr, LitDecl):
        return _literal(expr.value)
    raise TypeError(f"inserted terms are depth one: unexpected argument {expr!r}")


def _stored_arg(expr: Any) -> Any:
    if isinstance(expr, ValueDecl):
        return expr.value
    if isinstance(expr, LitDecl):
        return _literal(expr.value)
    raise TypeError(f"e-nodes have e-classes and literals as arguments: unexpected {expr!r}")


def _literal(value: Any) -> Any:
    # Floats by their exact text: a NaN constant equals itself, and 0.0 stays apart from -0.0.
    return (float, value.hex()) if isinstance(value, float) else value
