"""Luminal: deep learning as a static graph of a few primitive ops, made fast by search-based compilation.

import numpy as np, luminal as lm
g = lm.Graph()
x = g.input("x", (lm.sym("batch"), 384))
w = g.weight("w", (384, 10))
(x @ w).softmax(-1).output("probs")
g.bind({"w": np.ones((384, 10), np.float32)})
out = lm.run(g, {"x": np.zeros((2, 384), np.float32)})
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from luminal import dtypes, ops
from luminal.dtypes import (
    DType,
    DTypeError,
    bfloat16,
    bool_,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from luminal.graph import Graph, GraphError
from luminal.graph_file import GraphFileError
from luminal.symbolic import Expr, SymbolicError, smax, smin, sym
from luminal.tensor import Tensor, _bind_methods
from luminal.view import ShapeError, ShapeTracker

_bind_methods()

from luminal import functional  # noqa: E402  (needs the methods bound)

__version__ = "0.1.0"
bool = bool_  # noqa: A001 - lm.bool mirrors torch.bool


def run(graph: Graph, inputs: Mapping[str, Any], dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """Run `graph` with the reference interpreter (numpy). Symbols are bound from the inputs' shapes."""
    from luminal.runtime.reference import execute

    return execute(graph, inputs, dims)


def save(graph: Graph, path: Any) -> None:
    """Write `graph` (structure, signature, symbol ranges and bound weights) to one `.lgraph` file."""
    from luminal.graph_file import save_graph

    save_graph(graph, path)


def load(path: Any) -> Graph:
    """Read a `.lgraph` file, treating it as hostile: any defect raises `GraphFileError` naming it."""
    from luminal.graph_file import load_graph

    return load_graph(path)


def compile(graph: Graph, target: str = "cpu", **options: Any):  # noqa: A001 - the pinned API name
    """Compile `graph` for `target` ("cpu", a GPU such as "h100", or "reference" for the interpreter); `.run(inputs)`
    returns what `lm.run` does (a GPU program raises `luminal.runtime.RuntimeUnavailable` where no GPU runtime can
    run it). Options: search=True, profile=False, profile_dims=None, search_options=None, cache=True
    (see compiler/program.py); `program.report` says what the compiler found and chose.
    """
    from luminal.compiler.program import compile_graph

    return compile_graph(graph, target, **options)


# Importers of other frameworks' models, loaded on first use as numpy and torch load their submodules: each
# pulls in a large optional dependency (onnx, torch) that `import luminal` must neither need nor wait for.
_LAZY_SUBMODULES = ("onnx", "torch")


def __getattr__(name: str) -> Any:
    """`lm.onnx` and `lm.torch` without importing them first (PEP 562)."""
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"luminal.{name}")  # (which also sets it as this module's attribute)
    raise AttributeError(f"module 'luminal' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_SUBMODULES))


__all__ = [
    "DType",
    "DTypeError",
    "Expr",
    "Graph",
    "GraphError",
    "GraphFileError",
    "ShapeError",
    "ShapeTracker",
    "SymbolicError",
    "Tensor",
    "bfloat16",
    "bool",
    "bool_",
    "compile",
    "dtypes",
    "float16",
    "float32",
    "float64",
    "functional",
    "int8",
    "int16",
    "int32",
    "int64",
    "load",
    "ops",
    "run",
    "save",
    "smax",
    "smin",
    "sym",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]
