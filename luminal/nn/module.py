"""Module: a plain Python object that records its ops into the graph of the tensor it is called on.

A module declares its parameters by local name and shape when it is built (`self.declare("weight", (o, i))`),
and its submodules are its attributes, exactly as in PyTorch. The dotted path from the outermost module called
(`encoder.layer.0.attention.self.query.weight`) is therefore the PyTorch / Hugging Face state-dict name, and
that is the name each parameter gets in the graph (`graph.weight(name, shape)`), so a checkpoint binds by name:

    model = BertModel(config)
    hidden = model(g.input("input_ids", (batch, seq), dtype=lm.int64))
    g.bind(safetensors.numpy.load_file("model.safetensors"))

Paths are fixed the first time the outermost module is called (or `assign_names` is called); calling the same
module again on the same graph reuses the weights already registered there (tied weights, several outputs).
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from luminal import dtypes as dt
from luminal.dtypes import DType
from luminal.graph import Graph, GraphError
from luminal.tensor import Tensor
from luminal.view import ShapeError, format_shape


class Module:
    """Base class: subclasses call `super().__init__()`, declare parameters and implement `forward`."""

    def __init__(self) -> None:
        # object.__setattr__: our own __setattr__ reads these tables, so they must exist before it runs.
        object.__setattr__(self, "_children", {})
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_path", None)  # "" for the outermost module, "a.b." below it; None: unnamed

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Module):
            self._children[name] = value
        elif name in self._children:  # replacing a submodule by a non-module (e.g. None) removes it
            del self._children[name]
        object.__setattr__(self, name, value)

    # ---- parameters --------------------------------------------------------------------------------------
    def declare(self, name: str, shape: Sequence[int], dtype: Any = dt.float32) -> None:
        """Declare a parameter `name` (a state-dict leaf such as "weight") of a concrete shape."""
        if any(not isinstance(d, int) or d < 0 for d in shape):
            raise ShapeError(f"{type(self).__name__}: parameter {name!r} needs a concrete shape, got {shape}")
        self._params[name] = (tuple(shape), dt.dtype_of(dtype))

    def param(self, graph: Graph, name: str) -> Tensor:
        """The graph tensor of parameter `name`, registered under its full dotted name on first use."""
        if name not in self._params:
            raise GraphError(f"{type(self).__name__} has no parameter {name!r}; it declares {list(self._params)}")
        if self._path is None:
            self.assign_names()
        full = self._path + name
        shape, dtype = self._params[name]
        if full in graph.weights:  # registered by an earlier call on this graph: share it
            have = graph.nodes[graph.weights[full]]
            if tuple(have.shape) != shape or have.dtype != dtype:
                raise ShapeError(
                    f"weight {full!r} is already {have.dtype.name}{format_shape(have.shape)} in this graph, "
                    f"{type(self).__name__} wants {dtype.name}{format_shape(shape)}"
                )
            return graph.tensor(full)
        return graph.weight(full, shape, dtype)

    # ---- the module tree ---------------------------------------------------------------------------------
    def assign_names(self, prefix: str = "") -> Module:
        """Fix every parameter's dotted name below `prefix` (e.g. "bert." for a checkpoint saved with one)."""
        object.__setattr__(self, "_path", prefix)
        for child_name, child in self._children.items():
            child.assign_names(f"{prefix}{child_name}.")
        return self

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        yield prefix.rstrip("."), self
        for child_name, child in self._children.items():
            yield from child.named_modules(f"{prefix}{child_name}.")

    def parameter_shapes(self, prefix: str | None = None) -> dict[str, tuple[tuple[int, ...], DType]]:
        """{full name: (shape, dtype)} of every parameter, as `state_dict()` would name them (no graph needed)."""
        if prefix is None:
            prefix = self._path or ""
        out = {}
        for path, module in self.named_modules(prefix):
            for name, spec in module._params.items():
                out[f"{path}.{name}" if path else name] = spec
        return out

    # ---- calling -----------------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._path is None:  # the outermost module: its attribute paths become the weight names
            self.assign_names()
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement forward")

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, child in self._children.items():
            lines.append(f"  ({name}): " + repr(child).replace("\n", "\n  "))
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"


class ModuleList(Module):
    """Submodules named "0", "1", ... in order (torch.nn.ModuleList), e.g. `encoder.layer.3`."""

    def __init__(self, modules: Sequence[Module] = ()) -> None:
        super().__init__()
        for k, m in enumerate(modules):
            setattr(self, str(k), m)

    def __len__(self) -> int:
        return len(self._children)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._children.values())

    def __getitem__(self, k: int) -> Module:
        return list(self._children.values())[k]


class Sequential(ModuleList):
    """Submodules applied in order, each to the previous one's output (torch.nn.Sequential)."""

    def forward(self, x: Tensor) -> Tensor:
        for m in self:
            x = m(x)
        return x
