"""The weights of several compiled programs of one model, stored once.

The prefill and decode-step programs of a language model bind the same tensors (the compiler may rewrite a
program's weights, so equality is checked, not assumed): each distinct tensor is stored once under its name, and
a tensor one program holds differently from another is stored under `PROGRAM::name` for that program. Loading
binds every program to the same arrays, so the weights are held once in memory too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from luminal.compiler.storage.artifact_json import ArtifactError
from luminal.graph import Graph
from luminal.graph_file import GraphFileError, _bind

SEPARATOR = "::"


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a is b:
        return True
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.reshape(-1).view(np.uint8),
                                                                        b.reshape(-1).view(np.uint8))  # fmt: skip


def merged_weights(graphs: dict[str, Graph]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays, weight nodes) by stored name of `graphs` (program name -> graph), each shared tensor once."""
    arrays: dict[str, np.ndarray] = {}
    nodes: dict[str, Any] = {}
    for program, graph in graphs.items():
        for name in graph.weights:
            data, node = graph.weight_data[name], graph.nodes[graph.weights[name]]
            key = name if name not in arrays or _same(arrays[name], data) else f"{program}{SEPARATOR}{name}"
            arrays[key], nodes[key] = data, node
    return arrays, nodes


def weights_graph(graphs: dict[str, Graph]) -> Graph:
    """A graph that declares exactly the merged weights (what the `.lgraph` safetensors writer takes)."""
    arrays, nodes = merged_weights(graphs)
    holder = Graph()
    for key, node in nodes.items():
        holder.weight(key, node.shape, node.dtype)
    holder.bind(arrays)
    return holder


def bind_shared(graphs: dict[str, Graph], arrays: dict[str, np.ndarray]) -> None:
    """Bind each program's weights from the stored `arrays` (the same array objects for shared tensors); every
    stored tensor must be used and every declared weight present, with its declared dtype and shape."""
    used: set[str] = set()
    for program, graph in graphs.items():
        own = {}
        for name in graph.weights:
            key = f"{program}{SEPARATOR}{name}"
            key = key if key in arrays else name
            if key not in arrays:
                raise ArtifactError(f"{program}: weight {name!r:.80} is not in the stored weights")
            own[name] = arrays[key]
            used.add(key)
        try:
            _bind(graph, own)
        except GraphFileError as e:
            raise ArtifactError(f"{program}: {e}") from None
    unused = sorted(set(arrays) - used)
    if unused:
        raise ArtifactError(f"the stored weights hold tensors no program binds: {unused[:5]!r:.300}")
