"""`export(module, example_inputs, dynamic_shapes=None) -> luminal.Graph`, through torch.export.

torch.export traces the module into an ATen graph whose parameters and buffers are lifted to inputs; those
become graph weights under their state-dict names with their data bound, the user inputs graph inputs (their
dynamic dims luminal symbols), and the user outputs `output0`, `output1`, ... in order.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch.export.graph_signature import InputKind, OutputKind

from luminal.graph import Graph
from luminal.padding import declare_masked_sequence_padding
from luminal.tensor import Tensor
from luminal.torch.arrays import to_numpy
from luminal.torch.decompositions import decomposition_table
from luminal.torch.dtypes import from_torch
from luminal.torch.errors import TorchImportError
from luminal.torch.symbols import dim_names, input_shape
from luminal.torch.translate import translate


def export(
    module: torch.nn.Module, example_inputs: Sequence[Any], dynamic_shapes: Any = None, **export_options: Any
) -> Graph:
    """Trace `module` with torch.export on `example_inputs` (a tuple of positional arguments) and translate it
    into a luminal graph with bound weights. `dynamic_shapes` is torch.export's: `torch.export.Dim` sizes
    become `lm.sym` symbols with the Dim's name and range. Export it with `lm.save(graph, path)`."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    with torch.no_grad():
        program = torch.export.export(module, tuple(example_inputs), dynamic_shapes=dynamic_shapes, **export_options)
        program = program.run_decompositions(decomposition_table())
    return from_exported_program(program, dynamic_shapes)


def from_exported_program(program: torch.export.ExportedProgram, dynamic_shapes: Any = None) -> Graph:
    """Translate an already exported (and decomposed) program."""
    graph = Graph()
    placeholders: dict[str, Any] = {}
    specs = program.graph_signature.input_specs
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    user = [s for s in specs if s.kind == InputKind.USER_INPUT]
    metas = [nodes[s.arg.name].meta.get("val") for s in user]
    names = dim_names(dynamic_shapes, [s.arg.name for s in user], metas)
    for spec in specs:
        node = nodes[spec.arg.name]
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            placeholders[node.name] = _weight(graph, program, spec.target, spec.kind)
        elif spec.kind == InputKind.USER_INPUT:
            meta = node.meta.get("val")
            if not isinstance(meta, torch.Tensor):
                raise TorchImportError(
                    f"input {node.name}: only tensor inputs are supported, got {type(meta).__name__}"
                )
            shape = input_shape(meta, names, program.range_constraints, node.name)
            placeholders[node.name] = graph.input(node.name, shape, from_torch(meta.dtype, f"input {node.name}"))
        else:
            raise TorchImportError(f"input {node.name}: {spec.kind.name} inputs are not supported")
    for spec in program.graph_signature.output_specs:
        if spec.kind != OutputKind.USER_OUTPUT:
            raise TorchImportError(
                f"the program mutates state ({spec.kind.name} {spec.target}): inference graphs cannot"
            )
    outputs = translate(program.graph, graph, placeholders)
    for i, value in enumerate(outputs):
        if not isinstance(value, Tensor):
            raise TorchImportError(f"output {i} is {type(value).__name__}, not a tensor")
        value.output(f"output{i}")
    # A masked sequence model (attention_mask [batch, seq]) may batch requests of different lengths.
    declare_masked_sequence_padding(graph)
    return graph


def _weight(graph: Graph, program: torch.export.ExportedProgram, name: str, kind: InputKind) -> Tensor:
    """A parameter, buffer or constant as a graph weight under its state-dict name, its data bound."""
    data = program.state_dict.get(name) if kind != InputKind.CONSTANT_TENSOR else None
    if data is None:
        data = program.constants.get(name)  # non-persistent buffers and lifted constants live here
    if not isinstance(data, torch.Tensor):
        raise TorchImportError(f"weight {name}: no tensor data in the exported program")
    array = to_numpy(data)
    weight = graph.weight(name, array.shape, from_torch(data.dtype, f"weight {name}"))
    graph.bind({name: array})
    return weight
