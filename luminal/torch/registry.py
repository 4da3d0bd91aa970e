"""The table of ATen operators the importer translates: operator name -> translator.

Names are torch's: an overload packet such as "aten.add" covers all its overloads (add.Tensor, add.Scalar),
since the translator reads the arguments by their schema names; a name with an overload ("aten.split.Tensor")
covers only that one and wins over its packet. Python operators on sizes (operator.mul on SymInts) are
registered under their own names ("operator.mul").
"""

from __future__ import annotations

from typing import Any, Callable

Translator = Callable[[Any], Any]

ATEN: dict[str, Translator] = {}


def translates(*names: str) -> Callable[[Translator], Translator]:
    def register(fn: Translator) -> Translator:
        for name in names:
            if name in ATEN:
                raise RuntimeError(f"ATen operator {name} is registered twice")
            ATEN[name] = fn
        return fn

    return register


def operator_name(target: Any) -> str:
    """The name an FX call_function target is known by: "aten.add.Tensor", "operator.getitem"."""
    from torch._ops import OpOverload, OpOverloadPacket

    if isinstance(target, (OpOverload, OpOverloadPacket)):
        return str(target)
    module = getattr(target, "__module__", None) or ""
    if module in ("_operator", "operator"):
        module = "operator"
    return f"{module}.{getattr(target, '__name__', repr(target))}".lstrip(".")


def lookup(target: Any) -> Translator | None:
    name = operator_name(target)
    if name in ATEN:
        return ATEN[name]
    packet = name.rsplit(".", 1)[0] if name.startswith("aten.") and name.count(".") == 2 else None
    return ATEN.get(packet) if packet else None


def supported_operators() -> list[str]:
    """The ATen operators (and Python size operators) the importer translates, sorted."""
    from luminal.torch import ops  # noqa: F401  (importing the translator modules fills ATEN)

    return sorted(ATEN)
