"""`torch.compile(model, backend=luminal.torch.backend)`: inference through programs compiled by lm.compile.

Dynamo hands over an FX graph of torch-level calls; AOT autograd (with the same decomposition table as
`export`) turns it into an ATen graph whose parameters are inputs, which `LuminalForward` translates and
compiles for the CPU once per input shape signature (dynamo re-invokes with new shapes, and a graph it made
dynamic carries its sizes as extra int arguments, which are part of the signature). Parameters stay inputs,
so a changed weight is used on the next call without recompiling.

Policy on what cannot be translated: the backend raises (`TorchUnsupportedError` naming every unsupported
operator, at compile time, before anything runs); it never falls back to eager silently. Training is refused:
the backend only compiles graphs traced with gradients off (`torch.no_grad()` / `torch.inference_mode()`).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import fx

import luminal as lm
from luminal.graph import Graph
from luminal.tensor import Tensor
from luminal.torch.arrays import from_numpy, to_numpy
from luminal.torch.decompositions import decomposition_dict
from luminal.torch.dtypes import from_torch
from luminal.torch.errors import TorchImportError
from luminal.torch.translate import check_operators, translate


def backend(gm: fx.GraphModule, example_inputs: Sequence[Any], **compile_options: Any):
    """A torch.compile backend: `torch.compile(model, backend=luminal.torch.backend)`. Extra keyword
    arguments go to `lm.compile`: `backend=functools.partial(luminal.torch.backend, search=False)`."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs):
        raise TorchImportError(
            "luminal.torch.backend compiles inference only: call the compiled model under torch.no_grad() "
            "or torch.inference_mode()"
        )

    def forward_compiler(aten: fx.GraphModule, _inputs: Sequence[Any]):
        return make_boxed_func(LuminalForward(aten.graph, compile_options))

    return aot_autograd(fw_compiler=forward_compiler, decompositions=decomposition_dict())(gm, example_inputs)


class LuminalForward:
    """Runs one ATen graph as luminal programs, one compiled per shape signature of its arguments."""

    def __init__(self, fx_graph: fx.Graph, compile_options: dict[str, Any]) -> None:
        check_operators(fx_graph)  # fail when torch.compile compiles, naming every unsupported operator
        self.fx_graph = fx_graph
        self.compile_options = compile_options
        self.placeholders = [n.name for n in fx_graph.nodes if n.op == "placeholder"]
        self.programs: dict[tuple, Any] = {}

    def __call__(self, *args: Any) -> list[Any]:
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else ("int", int(a)) for a in args)
        compiled = self.programs.get(key)
        if compiled is None:
            compiled = self.programs[key] = self._compile(args)
        program, outputs = compiled
        arrays = {f"arg{i}": to_numpy(a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
        results = program.run(arrays)
        return [from_numpy(results[o]) if isinstance(o, str) else o for o in outputs]

    def _compile(self, args: Sequence[Any]) -> tuple[Any, list[Any]]:
        """A program for these concrete shapes (tensor arguments become inputs, size arguments plain ints),
        and what each output is: a tensor output's name, or the int of a size output (AOT autograd returns
        the sizes of a graph dynamo made dynamic)."""
        graph = Graph()
        values: dict[str, Any] = {}
        for i, (name, a) in enumerate(zip(self.placeholders, args)):
            if isinstance(a, torch.Tensor):
                values[name] = graph.input(f"arg{i}", tuple(a.shape), from_torch(a.dtype, f"argument {i}"))
            elif isinstance(a, (int, torch.SymInt)):
                values[name] = int(a)
            else:
                raise TorchImportError(f"argument {i}: {type(a).__name__} arguments are not supported")
        outputs: list[Any] = []
        for i, value in enumerate(translate(self.fx_graph, graph, values)):
            if isinstance(value, Tensor):
                value.output(f"output{i}")
                outputs.append(f"output{i}")
            elif isinstance(value, int):  # every size is concrete here
                outputs.append(value)
            else:
                raise TorchImportError(f"output {i} is {type(value).__name__}, not a tensor or a size")
        return lm.compile(graph, target="cpu", **self.compile_options), outputs
