"""One FX node being translated: its arguments bound to their schema names, FX nodes replaced by their values.

Values are luminal Tensors, Python numbers, sizes (int or a luminal `Expr` for a symbolic size), lists of
those, or None. Binding by name means a translator reads `c["alpha"]` whether the graph passed it
positionally or by keyword, with the schema's default when it was left out.
"""

from __future__ import annotations

from typing import Any

from luminal.graph import Graph
from luminal.torch.errors import TorchImportError, TorchUnsupportedError


class Unavailable:
    """An output the translation does not produce (max_pool2d_with_indices' indices): any use is an error."""

    def __init__(self, what: str) -> None:
        self.what = what


class Call:
    def __init__(self, name: str, target: Any, args: tuple, kwargs: dict, graph: Graph, meta: Any) -> None:
        self.name = name
        self.graph = graph
        self.meta = meta  # torch's value for the node (a FakeTensor with shape and dtype), or None
        self.args = _bind(target, args, kwargs)
        for key, value in self.args.items():
            # getitem picks one output of a multi-output op: only its consumers use (or must not use) it
            for v in value if isinstance(value, (list, tuple)) and name != "operator.getitem" else [value]:
                if isinstance(v, Unavailable):
                    raise TorchUnsupportedError(
                        f"{name}: argument {key!r} uses {v.what}, which is not translated", (name,)
                    )

    def __getitem__(self, key: str | int) -> Any:
        return self.args[key]

    def get(self, key: str | int, default: Any = None) -> Any:
        value = self.args.get(key, default)
        return default if value is None else value

    def unsupported(self, why: str) -> TorchUnsupportedError:
        return TorchUnsupportedError(f"{self.name}: {why}", (self.name,))

    def error(self, why: str) -> TorchImportError:
        return TorchImportError(f"{self.name}: {why}")


def _bind(target: Any, args: tuple, kwargs: dict) -> dict[str | int, Any]:
    """{schema argument name: value} with defaults filled; Python operators keep positions (0, 1, ...)."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return dict(enumerate(args)) | dict(kwargs)
    bound: dict[str | int, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
        else:
            bound[arg.name] = None
    return bound
