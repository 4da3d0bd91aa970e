"""The walk over an ATen FX graph, node by node in its (topological) order, recording luminal ops.

Shared by `luminal.torch.export` (an exported program, sizes symbolic) and the `torch.compile` backend (an
AOT-autograd graph, translated once per concrete input shape). After each node the result is checked against
torch's own metadata for it (dtype, rank, every concrete size), so a translation that disagrees with torch
fails at import, naming the node, instead of giving a wrong number later.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import fx

from luminal.graph import Graph
from luminal.symbolic import as_dim
from luminal.tensor import Tensor
from luminal.torch.call import Call, Unavailable
from luminal.torch.dtypes import from_torch
from luminal.torch.errors import TorchImportError, TorchUnsupportedError
from luminal.torch.registry import lookup, operator_name


def check_operators(fx_graph: fx.Graph) -> None:
    """Refuse the graph up front, naming every operator it calls that the importer does not translate."""
    from luminal.torch import ops  # noqa: F401  (importing the translator modules fills the registry)

    missing = sorted(
        {operator_name(n.target) for n in fx_graph.nodes if n.op == "call_function" and lookup(n.target) is None}
    )
    if missing:
        raise TorchUnsupportedError(f"unsupported ATen operator(s): {', '.join(missing)}", tuple(missing))


def translate(fx_graph: fx.Graph, graph: Graph, placeholders: Mapping[str, Any]) -> list[Any]:
    """Record `fx_graph` into `graph`; `placeholders` gives each placeholder node's value by node name.
    Returns the values of the graph's outputs, flattened in order."""
    check_operators(fx_graph)
    env: dict[str, Any] = {}
    for node in fx_graph.nodes:
        if node.op == "placeholder":
            env[node.name] = placeholders[node.name]
        elif node.op == "call_function":
            args = fx.node.map_arg(node.args, lambda n: env[n.name])
            kwargs = fx.node.map_arg(node.kwargs, lambda n: env[n.name])
            name = operator_name(node.target)
            call = Call(name, node.target, tuple(args), dict(kwargs), graph, node.meta.get("val"))
            value = lookup(node.target)(call)
            _check(node, name, value)
            env[node.name] = value
        elif node.op == "output":
            outputs = list(_flatten(fx.node.map_arg(node.args[0], lambda n: env[n.name])))
            for i, value in enumerate(outputs):
                if isinstance(value, Unavailable):
                    raise TorchUnsupportedError(f"output {i} is {value.what}, which is not translated")
            return outputs
        else:  # get_attr / call_module / call_method never appear in an ATen graph whose parameters are lifted
            raise TorchImportError(f"FX node {node.name}: {node.op} nodes are not translated (expected an ATen graph)")
    raise TorchImportError("the FX graph has no output node")


def _flatten(value: Any):
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from _flatten(v)
    else:
        yield value


def _check(node: fx.Node, name: str, value: Any) -> None:
    """The translated value agrees with torch's metadata for the node: dtype, rank and concrete sizes, output
    by output for multi-output ops (untranslated outputs, such as saved statistics, are skipped)."""
    meta = node.meta.get("val")
    if isinstance(value, (tuple, list)) and isinstance(meta, (tuple, list)) and len(value) == len(meta):
        for v, m in zip(value, meta):
            _check_tensor(node, name, v, m)
    else:
        _check_tensor(node, name, value, meta)


def _check_tensor(node: fx.Node, name: str, value: Any, meta: Any) -> None:
    if not (isinstance(value, Tensor) and isinstance(meta, torch.Tensor)):
        return
    want = from_torch(meta.dtype, f"{node.name} ({name})")
    shape = [as_dim(d) for d in value.shape]
    sizes = [d if isinstance(d, int) else None for d in meta.shape]  # SymInts: symbolic in torch, skip
    mismatch = value.dtype != want or len(shape) != len(sizes)
    mismatch = mismatch or any(s is not None and isinstance(g, int) and g != s for g, s in zip(shape, sizes))
    if mismatch:
        raise TorchImportError(
            f"{node.name} ({name}): translated to {value.dtype.name}{list(shape)}, torch has {meta.dtype}"
            f"{list(meta.shape)}"
        )
